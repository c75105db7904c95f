#!/usr/bin/env python3
"""One training step of the CNN+CBAM classifier in PyTorch: the reference for qkv's trainer on
train/configs/fashion_cbam.json.

The model is qkv's CnnClassifier as python/qkv_torch_models builds it (the module the parity
tests hold to qkv's): channels 16, 32, 64, CBAM with reduction 4, on [128, 1, 28, 28] images,
in training mode (BatchNorm on the batch's statistics). The step is the trainer's: cross-entropy
with label smoothing 0.1, gradients clipped to norm 1, AdamW (lr 0.003, betas 0.9 and 0.98,
weight decay 0.0005). The images are random: the time of a step does not depend on them.
bf16 runs the forward under torch.autocast(dtype=torch.bfloat16), as the trainer's --precision
bf16 runs qkv's under Autocast.
Prints "ms/step <median>" of 30 steps after 5 warm-up steps, for compare_step.sh.
Usage: torch_cnn_step.py [threads] [f32|bf16]
"""
import os
import sys

import torch
from torch import nn

from torch_timing import median_step, print_environment

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from qkv_torch_models.models import CnnClassifier  # noqa: E402

THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
PRECISION = sys.argv[2] if len(sys.argv) > 2 else "f32"
if PRECISION not in ("f32", "bf16"):
    sys.exit(f"torch_cnn_step.py: unknown precision '{PRECISION}' (f32 or bf16)")
BATCH, SIZE, CLASSES = 128, 28, 10


def main():
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    model = CnnClassifier(dict(channels=[16, 32, 64], attention="cbam", reduction=4)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    images = torch.randn(BATCH, 1, SIZE, SIZE)
    labels = torch.randint(0, CLASSES, (BATCH,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=PRECISION == "bf16"):
            loss = loss_fn(model(images), labels)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    print(f"torch {torch.__version__} threads {THREADS} CnnClassifier channels 16,32,64 cbam, "
          f"batch {BATCH}, precision {PRECISION}")
    median_step(step)
    print_environment("oneDNN (mkldnn) " +
                      ("available" if torch.backends.mkldnn.is_available() else "not available"))


if __name__ == "__main__":
    main()
