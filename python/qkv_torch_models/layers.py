"""Transformer stacks as qkv builds them (nn/transformer.h), out of torch.nn's namesakes.

With an input-level positional encoding (or none) the layers are torch.nn.TransformerEncoderLayer
and TransformerDecoderLayer themselves: qkv's layers compute the same thing (post-norm by default,
pre-norm with norm_first, a final LayerNorm on a pre-norm stack). With an in-attention scheme
(relative, rope, alibi) each self-attention is a PositionalMultiheadAttention: torch's
MultiheadAttention with its parameters (in_proj_weight, in_proj_bias, out_proj) and a `position`
child that rotates queries and keys or adds to the scores inside every head, which torch's own
attention cannot do.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from .positions import IN_ATTENTION, make_attention_position


class PositionalMultiheadAttention(nn.MultiheadAttention):
    """Batch-first self-attention with qkv's in-attention positions (nn/attention.cpp's order:
    project, split heads, position.rotate, scores * 1/sqrt(head_dim) + position.score_bias,
    masks, softmax, merge heads, out_proj)."""

    def __init__(self, embed_dim, num_heads, dropout, position):
        super().__init__(embed_dim, num_heads, dropout=dropout, batch_first=True)
        self.position = position

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True):
        B, T, E = query.shape
        S, H = key.shape[1], self.num_heads
        d = E // H
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        b_q, b_k, b_v = self.in_proj_bias.chunk(3)

        def heads(x, L):
            return x.reshape(B, L, H, d).transpose(1, 2)

        q = heads(F.linear(query, w_q, b_q), T)
        k = heads(F.linear(key, w_k, b_k), S)
        v = heads(F.linear(value, w_v, b_v), S)
        q, k = self.position.rotate(q, k)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        bias = self.position.score_bias(q, S)
        if bias is not None:
            scores = scores + bias
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask.view(B, 1, 1, S), float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                scores = scores.masked_fill(attn_mask, float("-inf"))
            else:
                scores = scores + attn_mask
        weights = torch.softmax(scores, dim=-1)
        weights = F.dropout(weights, self.dropout, self.training)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(B, T, E)
        out = self.out_proj(out)
        if not need_weights:
            return out, None
        return out, weights.mean(dim=1) if average_attn_weights else weights


class CompositeEncoderLayer(nn.TransformerEncoderLayer):
    """TransformerEncoderLayer that always runs its composite path. The fused fast path of torch
    1.13 (eval, no grad) reads in_proj_weight directly and would skip the self-attention's
    position."""

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask))
        return self.norm2(x + self._ff_block(x))


def _self_attention(d_model, num_heads, dropout, positional):
    if positional not in IN_ATTENTION:  # input-level or none: torch's own attention
        return None
    position = make_attention_position(positional, num_heads, d_model // num_heads)
    return PositionalMultiheadAttention(d_model, num_heads, dropout, position)


def encoder(d_model, num_heads, dim_feedforward, dropout, activation, norm_first, positional,
            num_layers):
    """nn.TransformerEncoder of `num_layers` layers (names layers.<i>.*, norm.* with norm_first)."""
    layers = []
    for _ in range(num_layers):
        attention = _self_attention(d_model, num_heads, dropout, positional)
        kind = nn.TransformerEncoderLayer if attention is None else CompositeEncoderLayer
        layer = kind(d_model, num_heads, dim_feedforward, dropout, activation, batch_first=True,
                     norm_first=norm_first)
        if attention is not None:
            layer.self_attn = attention
        layers.append(layer)
    return _stack(nn.TransformerEncoder, layers, d_model, norm_first, enable_nested_tensor=False)


def decoder(d_model, num_heads, dim_feedforward, dropout, activation, norm_first, positional,
            num_layers):
    """nn.TransformerDecoder; cross-attention is the layers' multihead_attn (qkv: cross_attn)."""
    layers = []
    for _ in range(num_layers):
        layer = nn.TransformerDecoderLayer(d_model, num_heads, dim_feedforward, dropout, activation,
                                           batch_first=True, norm_first=norm_first)
        attention = _self_attention(d_model, num_heads, dropout, positional)
        if attention is not None:
            layer.self_attn = attention
        layers.append(layer)
    return _stack(nn.TransformerDecoder, layers, d_model, norm_first)


def _stack(kind, layers, d_model, norm_first, **options):
    # torch's stacks deep-copy one layer num_layers times; each layer here has its own scheme
    # object already, so the list is put in place after building from the first.
    stack = kind(layers[0], len(layers), norm=nn.LayerNorm(d_model) if norm_first else None,
                 **options)
    stack.layers = nn.ModuleList(layers)
    return stack


def causal_mask(T, device=None):
    """bool [T, T], True above the diagonal (blocked), as qkv's causal_mask."""
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
