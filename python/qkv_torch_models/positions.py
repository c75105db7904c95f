"""qkv's five positional encodings in PyTorch (nn/positional.h), with qkv's parameter names.

Input-level ones are added to the embeddings: SinusoidalPositionalEncoding (buffer "pe"),
LearnedPositionalEncoding (parameter "weight"). In-attention ones act on each head's queries and
keys [B, H, T, head_dim]: RelativePositionBias (parameter "weight"), RotaryEmbedding, ALiBi. Tables
are computed in float64 and rounded once to the input's dtype, as qkv computes them.
"""

import math

import torch
from torch import nn


def sinusoid_table(n, d, dtype=torch.float32):
    """[n, d]: even columns sin(p / 10000^(i/d)) for even i, odd columns cos of the same angle."""
    table = torch.zeros(n, d, dtype=torch.float64)
    for i in range(0, d, 2):
        angle = torch.arange(n, dtype=torch.float64) / math.pow(10000.0, i / d)
        table[:, i] = torch.sin(angle)
        if i + 1 < d:
            table[:, i + 1] = torch.cos(angle)
    return table.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("pe", sinusoid_table(max_len, d_model))

    def forward(self, x, offset=0):
        T = x.shape[1]
        table = self.pe
        if offset + T > table.shape[0]:  # past the stored rows: computed on the fly, as qkv does
            table = sinusoid_table(offset + T, self.d_model)
        return x + table[offset : offset + T].to(x.dtype)


class LearnedPositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, d_model))

    def forward(self, x, offset=0):
        T = x.shape[1]
        if offset + T > self.weight.shape[0]:
            raise ValueError(f"LearnedPositionalEncoding: positions up to {offset + T} exceed "
                             f"max_len {self.weight.shape[0]}")
        return x + self.weight[offset : offset + T]


class RelativePositionBias(nn.Module):
    """Shaw et al.: scores[i, j] += q_i . a[clip(j - i, -m, m) + m] / sqrt(head_dim)."""

    def __init__(self, head_dim, max_distance=16):
        super().__init__()
        self.head_dim, self.max_distance = head_dim, max_distance
        self.weight = nn.Parameter(torch.zeros(2 * max_distance + 1, head_dim))

    def rotate(self, q, k):
        return q, k

    def score_bias(self, q, S):
        T = q.shape[2]
        every = torch.matmul(q, self.weight.t()) * (1.0 / math.sqrt(self.head_dim))
        i = torch.arange(T).view(T, 1)
        j = torch.arange(S).view(1, S)
        index = (j - i).clamp(-self.max_distance, self.max_distance) + self.max_distance
        return torch.gather(every, 3, index.expand(q.shape[0], q.shape[1], T, S).to(q.device))


class RotaryEmbedding(nn.Module):
    """Su et al.: feature pairs (i, i + d/2) rotated by angle position * base^(-2i/d)."""

    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        self.head_dim, self.base = head_dim, base

    def apply(self, x):
        L, half = x.shape[-2], self.head_dim // 2
        inverse = torch.tensor([math.pow(self.base, -2.0 * i / self.head_dim) for i in range(half)],
                               dtype=torch.float64)
        angle = torch.arange(L, dtype=torch.float64).view(L, 1) * inverse.view(1, half)
        angle = torch.cat([angle, angle], dim=-1)
        cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def rotate(self, q, k):
        return self.apply(q), self.apply(k)

    def score_bias(self, q, S):
        return None


class ALiBi(nn.Module):
    """Press et al.: head h adds -2^(-8 (h+1) / H) * |i - j| to the scores."""

    def __init__(self, num_heads):
        super().__init__()
        self.num_heads = num_heads

    def rotate(self, q, k):
        return q, k

    def score_bias(self, q, S):
        H, T = q.shape[1], q.shape[2]
        slopes = torch.tensor([math.pow(2.0, -8.0 * (h + 1) / H) for h in range(H)],
                              dtype=torch.float64)
        distance = (torch.arange(T).view(T, 1) - torch.arange(S).view(1, S)).abs().to(torch.float64)
        return (-slopes.view(1, H, 1, 1) * distance).to(q.dtype).to(q.device)


INPUT_LEVEL = ("sinusoidal", "learned")
IN_ATTENTION = ("relative", "rope", "alibi")


def make_positional_encoding(kind, d_model, max_len):
    """The input-level encoding for `kind`, None for the in-attention kinds."""
    check_kind(kind)
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, max_len)
    if kind == "learned":
        return LearnedPositionalEncoding(d_model, max_len)
    return None


def make_attention_position(kind, num_heads, head_dim):
    """A fresh in-attention scheme for one attention layer, None for the input-level kinds."""
    check_kind(kind)
    if kind == "relative":
        return RelativePositionBias(head_dim)
    if kind == "rope":
        return RotaryEmbedding(head_dim)
    if kind == "alibi":
        return ALiBi(num_heads)
    return None


def check_kind(kind):
    if kind not in INPUT_LEVEL + IN_ATTENTION:
        raise ValueError(f"positional: unknown encoding '{kind}' (sinusoidal, learned, relative, "
                         "rope, alibi)")
