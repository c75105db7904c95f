"""The driver's own bad inputs: each exits 1 with one line on stderr naming what is wrong."""

import os
import subprocess
import tempfile

import torch

from parity import DRIVER, Family, save_file

f = Family("driver")


def bad_input(label, case, tensors, meta, expected):
    with tempfile.TemporaryDirectory(prefix="qkv_parity_") as tmp:
        src, dst = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        save_file(src, tensors, meta)
        run = subprocess.run([DRIVER, case, src, dst], capture_output=True, text=True)
    lines = run.stderr.strip().splitlines()
    ok = run.returncode == 1 and len(lines) == 1 and expected in lines[0]
    f.expect(label, ok, f"expected exit 1 and one line with {expected!r}, got exit "
                        f"{run.returncode}: {run.stderr.strip()!r}")

x = {"in.x": torch.zeros(2, 5, dtype=torch.float64)}
linear_meta = {"in_features": "5", "out_features": "3"}
bad_input("unknown_case", "no_such_case", x, {},
          "torch_parity_driver: unknown case 'no_such_case' (activation, batch_norm2d")
bad_input("missing_metadata", "linear", x, {"in_features": "5"},
          "linear: missing metadata 'out_features'")
bad_input("metadata_not_an_integer", "linear", x, {"in_features": "5", "out_features": "3x"},
          "linear: metadata 'out_features' is not an integer: '3x'")
bad_input("missing_parameter", "linear", dict(x, **{"param.weight": torch.zeros(3, 5)}),
          linear_meta, "linear: missing tensor 'param.bias'")
bad_input("unknown_parameter", "linear",
          dict(x, **{"param.weight": torch.zeros(3, 5), "param.bias": torch.zeros(3),
                     "param.scale": torch.zeros(3)}),
          linear_meta, "linear: 'param.scale' names no parameter or buffer of the module")
bad_input("missing_input", "linear",
          {"param.weight": torch.zeros(3, 5), "param.bias": torch.zeros(3)}, linear_meta,
          "linear: missing tensor 'in.x'")
bad_input("bad_dtype", "linear", x, dict(linear_meta, dtype="f16"),
          "linear: metadata 'dtype' must be f64 or f32, got 'f16'")

f.finish()
