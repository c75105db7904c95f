#!/usr/bin/env python3
"""PyTorch timings for the shapes tests/bench/bench_cuda.cpp measures, on the same GPU.

Prints "RESULT | ..." lines in bench_cuda's format so tests/gpu/run.sh can put both in one
summary table. Timing: warm up once, then the mean of several runs between synchronizations.
float32 like qkv's lines (torch's own flash kernel needs half precision, so for float32
scaled_dot_product_attention picks its memory-efficient or math kernel); then the bf16 products
under autocast, and bf16 attention (torch's flash kernel), which issue #6's target compares with.
"""
import sys
import time

import torch
import torch.nn.functional as F


def time_ms(run, reps):
    run()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / reps


def report(what, shape, ms, gflop):
    print(f"RESULT | {what:<20} | {shape:<22} | torch {ms:9.3f} ms {gflop / (ms * 1e-3):9.1f} GFLOP/s")
    sys.stdout.flush()


def bench_matmul(batch, m, n, k, precision):
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    a = torch.randn(batch, m, k, device="cuda")
    b = torch.randn(batch, k, n, device="cuda")
    gflop = 2.0 * batch * m * n * k * 1e-9

    def run():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            return torch.matmul(a, b)

    ms = time_ms(run, 5 if gflop > 100 else 20)
    name = {"f32": "matmul f32", "tf32": "matmul f32 (tf32)", "bf16": "matmul bf16 autocast"}
    report(name[precision], f"{batch}x{m}x{n}x{k}", ms, gflop)
    torch.backends.cuda.matmul.allow_tf32 = False


def bench_attention(batch, heads, t, d, causal, dtype=torch.float32):
    q, k, v = (torch.randn(batch, heads, t, d, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    go = torch.randn(batch, heads, t, d, device="cuda", dtype=dtype)
    suffix = " bf16" if dtype == torch.bfloat16 else ""
    fwd_gflop = 4.0 * batch * heads * t * t * d * 1e-9 * (0.5 if causal else 1)
    reps = 3 if t >= 4096 else 10
    shape = f"B{batch} H{heads} T{t} d{d}"
    with torch.no_grad():
        ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps)
    report(("flash fwd causal" if causal else "flash fwd") + suffix, shape, ms, fwd_gflop)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), go, retain_graph=True), reps)
    report(("flash bwd causal" if causal else "flash bwd") + suffix, shape, ms, 2.5 * fwd_gflop)


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    for precision in ("f32", "tf32", "bf16"):
        bench_matmul(1, 1024, 1024, 1024, precision)
        bench_matmul(1, 4096, 4096, 4096, precision)
        bench_matmul(64, 512, 512, 64, precision)
    for dtype in (torch.float32, torch.bfloat16):
        for t in (1024, 2048, 4096, 8192):
            for causal in (False, True):
                bench_attention(2, 8, t, 64, causal, dtype)


if __name__ == "__main__":
    main()
