#!/usr/bin/env python3
"""PyTorch twin of tests/bench/lm_bench.cpp: the same GPT, data pipeline and optimisation.

GPT at nanoGPT's CPU size: 4 pre-norm blocks (LayerNorm -> causal self-attention with separate
q/k/v projections -> residual, LayerNorm -> Linear 4x -> GELU -> Linear -> residual), width 128,
4 heads, context 64, learned positions, final LayerNorm, output tied to the token embedding, dropout
0; GPT-2 initialisation (normal 0.02, residual projections 0.02 / sqrt(2 x layers), zero biases).
Characters: <unk> at id 0, then the code points of the training split (the first 90% of the file,
cut back to a character boundary) in code point order. AdamW (betas 0.9/0.99, weight decay 0.1 on
weight matrices only, as qkv's weight_decay_groups), lr 1e-3 with 100 warmup steps and a cosine to
1e-4, gradient norm clipped at 1, batch 12 random windows. Validation: the first 2400 windows at
stride 64 of the validation split, as qkv's TokenWindows::sequential_windows.
Usage: torch_lm.py FILE [steps=2000] [threads=2]. Prints ms/step, valid_loss, bits_per_character.
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PATH = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
D, HEADS, LAYERS, FF, CONTEXT, BATCH = 128, 4, 4, 512, 64, 12
LR, MIN_LR, WARMUP, WD, CLIP, EVAL_WINDOWS = 1e-3, 1e-4, 100, 0.1, 1.0, 2400
torch.set_num_threads(THREADS)
torch.manual_seed(1337)

data = open(PATH, "rb").read()
cut = int(len(data) * (1 - 0.1))
while cut > 0 and (data[cut] & 0xC0) == 0x80:
    cut -= 1
train_text, valid_text = data[:cut].decode(), data[cut:].decode()
chars = sorted(set(train_text))
ids = {c: i + 1 for i, c in enumerate(chars)}
VOCAB = len(chars) + 1
train_ids = torch.tensor([ids[c] for c in train_text], dtype=torch.long)
valid_ids = torch.tensor([ids.get(c, 0) for c in valid_text], dtype=torch.long)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.q, self.k, self.v, self.out = (nn.Linear(D, D) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(D, FF), nn.Linear(FF, D)
        self.register_buffer("mask", torch.ones(CONTEXT, CONTEXT, dtype=torch.bool).triu(1))

    def attention(self, x):
        B, T, _ = x.shape
        heads = lambda t: t.view(B, T, HEADS, D // HEADS).transpose(1, 2)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
        att = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1)
        return self.out((att @ v).transpose(1, 2).reshape(B, T, D))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(CONTEXT, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        for b in self.blocks:
            nn.init.normal_(b.out.weight, 0.0, 0.02 / math.sqrt(2 * LAYERS))
            nn.init.normal_(b.fc2.weight, 0.0, 0.02 / math.sqrt(2 * LAYERS))

    def forward(self, idx):
        x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.ln(x) @ self.tok.weight.t()


def loss_of(model, windows, reduction="mean"):
    logits = model(windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), windows[:, 1:].reshape(-1), reduction=reduction)


def lr_at(step):  # step counts from 1, as nn::LrSchedule's warmup_cosine
    if step <= WARMUP:
        return LR * step / WARMUP
    progress = min(1.0, (step - WARMUP) / max(1, STEPS - WARMUP))
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * progress))


model = GPT()
decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and n not in ("tok.weight", "pos.weight")]
rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and n not in ("tok.weight", "pos.weight"))]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                        lr=LR, betas=(0.9, 0.99), eps=1e-8)
gen = torch.Generator().manual_seed(1338)
starts_count = len(train_ids) - CONTEXT
elapsed = 0.0
for step in range(1, STEPS + 1):
    t0 = time.perf_counter()
    for g in opt.param_groups:
        g["lr"] = lr_at(step)
    starts = torch.randint(starts_count, (BATCH,), generator=gen)
    batch = torch.stack([train_ids[s : s + CONTEXT + 1] for s in starts.tolist()])
    loss = loss_of(model, batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()
    elapsed += time.perf_counter() - t0

model.eval()
n = min(EVAL_WINDOWS, (len(valid_ids) - 1) // CONTEXT)
windows = torch.stack([valid_ids[r * CONTEXT : r * CONTEXT + CONTEXT + 1] for r in range(n)])
with torch.no_grad():
    nats = sum(loss_of(model, windows[i : i + BATCH], "sum").item() for i in range(0, n, BATCH))
loss = nats / (n * CONTEXT)
print(f"torch {torch.__version__} GPT: vocab {VOCAB}, {len(train_ids)} training / {len(valid_ids)} "
      f"validation tokens, {THREADS} threads, {STEPS} steps")
print(f"ms/step {1000 * elapsed / max(1, STEPS):.3f}")
print(f"valid_loss {loss:.4f}")
print(f"bits_per_character {loss / math.log(2):.4f}")
