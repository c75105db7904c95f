#!/usr/bin/env python3
"""One training step of the toy translation transformer in PyTorch: the reference for bench_step.

Same shapes as tests/bench/bench_step.cpp (qkv's Seq2SeqTransformer): d_model 128, 4 heads,
2 encoder + 2 decoder layers (post-norm), feed-forward 256, dropout 0.1, sinusoidal positions,
batch 64, source and target length 20, vocabulary 40, Adam, cross-entropy ignoring padding.
Prints "ms/step <median>" for compare_step.sh and tests/gpu/run.sh.
Usage: torch_step.py [threads] [cpu|cuda] [dropout] [f32|bf16]. On cuda each timed step ends with
a synchronization, as bench_step's do. bf16 runs the forward and the loss under
torch.autocast(dtype=torch.bfloat16), as bench_step's bf16 runs qkv's under Autocast.
"""
import math
import sys

import torch
import torch.nn as nn

from torch_timing import median_step, print_environment

THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
DEVICE = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cpu")
DROPOUT = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
PRECISION = sys.argv[4] if len(sys.argv) > 4 else "f32"
if PRECISION not in ("f32", "bf16"):
    sys.exit(f"torch_step.py: unknown precision '{PRECISION}' (f32 or bf16)")
D, HEADS, LAYERS, FF, BATCH, LEN, VOCAB, PAD = 128, 4, 2, 256, 64, 20, 40, 0


def sinusoids(length, dim):
    pos = torch.arange(length).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb = nn.Embedding(VOCAB, D)
        self.tgt_emb = nn.Embedding(VOCAB, D)
        self.register_buffer("pos", sinusoids(256, D))
        self.transformer = nn.Transformer(D, HEADS, LAYERS, LAYERS, FF, DROPOUT, batch_first=True)
        self.out = nn.Linear(D, VOCAB)

    def forward(self, src, tgt):
        scale = math.sqrt(D)
        s = self.src_emb(src) * scale + self.pos[: src.size(1)]
        t = self.tgt_emb(tgt) * scale + self.pos[: tgt.size(1)]
        causal = self.transformer.generate_square_subsequent_mask(tgt.size(1)).to(tgt.device)
        h = self.transformer(s, t, tgt_mask=causal, src_key_padding_mask=src == PAD,
                             tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
        return self.out(h)


def main():
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    model = Seq2Seq().to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD)
    src = torch.randint(1, VOCAB, (BATCH, LEN))
    tgt = torch.randint(1, VOCAB, (BATCH, LEN + 1))
    src[:, -3:] = PAD  # some padding, as in real batches
    src, tgt = src.to(DEVICE), tgt.to(DEVICE)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]

    def wait():
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=PRECISION == "bf16"):
            logits = model(src, tgt_in)
            loss = loss_fn(logits.reshape(-1, VOCAB), tgt_out.reshape(-1))
        loss.backward()
        opt.step()

    print(f"torch {torch.__version__} threads {THREADS} device {DEVICE} dropout {DROPOUT:g} "
          f"precision {PRECISION}")
    median_step(step, wait)
    if DEVICE.type == "cpu":
        print_environment()


if __name__ == "__main__":
    main()
