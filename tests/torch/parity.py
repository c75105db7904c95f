"""Shared by tests/torch/test_*.py: run a case through qkv's driver and compare with PyTorch.

A test builds a module in PyTorch, writes its weights and inputs (under qkv's parameter names)
with `run_qkv`, which calls build/torch_parity_driver and returns what qkv computed, and hands
both sides to `Family.check`. Each check prints one line:

    PASS attention/self_bool_attn_mask f64  worst 2.3e-16  (grad.in.query)

and a FAIL line names every tensor outside the tolerance with the element that differs most.
Tolerance per tensor: max|qkv - torch| <= tol * max|torch| (+ a floor for tensors that are zero
in exact arithmetic), tol = 1e-10 in float64 and 1e-5 in float32.
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402

from qkv_torch import load_file, save_file  # noqa: E402

DRIVER = os.environ.get("QKV_PARITY_DRIVER", os.path.join(REPO, "build", "torch_parity_driver"))
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}
DTYPE_NAME = {torch.float64: "f64", torch.float32: "f32"}

torch.manual_seed(0)


class DriverError(RuntimeError):
    pass


def run_qkv(case, tensors, meta, dtype):
    """Runs driver case `case` on `tensors` (name -> tensor) and `meta` (name -> value, written as
    strings; booleans as 0/1); returns the driver's output tensors by name."""
    meta = {k: (str(int(v)) if isinstance(v, bool) else str(v)) for k, v in meta.items()}
    meta["dtype"] = DTYPE_NAME[dtype]
    with tempfile.TemporaryDirectory(prefix="qkv_parity_") as tmp:
        src, dst = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        save_file(src, {k: v.detach() for k, v in tensors.items()}, meta)
        run = subprocess.run([DRIVER, case, src, dst], capture_output=True, text=True)
        if run.returncode != 0:
            raise DriverError(f"driver {case}: exit {run.returncode}: {run.stderr.strip()}")
        out, _ = load_file(dst)
    return out


def relative_error(ours, theirs, floor=0.0):
    """max|ours - theirs| / max(max|theirs|, floor), in float64."""
    a, b = ours.double(), theirs.double()
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    diff = (a - b).abs().max().item()
    scale = max(b.abs().max().item(), floor)
    if diff == 0.0:
        return 0.0
    return diff / scale if scale > 0 else float("inf")


def worst_element(ours, theirs):
    a, b = ours.double().reshape(-1), theirs.double().reshape(-1)
    i = int((a - b).abs().argmax())
    return f"[{i}] qkv {a[i].item():.17g} torch {b[i].item():.17g}"


class Family:
    """One test file's cases: prints a line per case, then the family's worst error; `finish`
    exits non-zero if any case failed."""

    def __init__(self, name):
        self.name = name
        self.passed = self.failed = 0
        self.worst = 0.0

    def case(self, label, dtype, fn):
        """Runs fn() -> (qkv outputs, torch outputs, floors) and checks it; an exception fails the
        case with its message."""
        try:
            ours, theirs, floors = fn()
        except Exception as e:  # the line must say what went wrong, whatever it was
            self._fail(label, dtype, f"error: {type(e).__name__}: {e}")
            return
        self.check(label, dtype, ours, theirs, floors)

    def check(self, label, dtype, ours, theirs, floors=None):
        """ours, theirs: dicts name -> tensor with the same keys (a key on one side only fails)."""
        floors = floors or {}
        tol = TOLERANCE[dtype]
        problems, worst, worst_name = [], 0.0, ""
        for name in sorted(set(ours) | set(theirs)):
            if name not in ours or name not in theirs:
                side = "qkv" if name in ours else "torch"
                problems.append((float("inf"), f"{name}: only {side} has it"))
                continue
            a, b = ours[name], theirs[name]
            if a.shape != b.shape:
                problems.append((float("inf"),
                                 f"{name}: shape qkv {list(a.shape)} torch {list(b.shape)}"))
                continue
            if not (a.is_floating_point() or b.is_floating_point()):
                if not torch.equal(a, b):
                    problems.append((float("inf"), f"{name}: differs: {worst_element(a, b)}"))
                continue
            err = relative_error(a, b, floors.get(name, 0.0))
            if err > worst:
                worst, worst_name = err, name
            if not err <= tol:
                problems.append((err, f"{name}: rel {err:.2e} at {worst_element(a, b)}"))
        if problems:
            # Structural problems (inf) first, then the largest errors; a few are enough to read.
            problems.sort(key=lambda p: -p[0])
            shown = [text for _, text in problems[:4]]
            if len(problems) > 4:
                shown.append(f"and {len(problems) - 4} more tensors")
            self._fail(label, dtype, "; ".join(shown), worst)
        else:
            self.passed += 1
            self.worst = max(self.worst, worst)
            print(f"PASS {self.name}/{label} {DTYPE_NAME[dtype]}  worst {worst:.1e}"
                  + (f"  ({worst_name})" if worst_name else ""), flush=True)

    def expect(self, label, ok, why):
        """A case that is a yes or no (an error message, not tensors); `why` explains a no."""
        if ok:
            self.passed += 1
            print(f"PASS {self.name}/{label}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {self.name}/{label}: {why}", flush=True)

    def _fail(self, label, dtype, why, worst=None):
        self.failed += 1
        head = f"FAIL {self.name}/{label} {DTYPE_NAME[dtype]}"
        if worst is not None:
            head += f"  worst {worst:.1e}"
        print(f"{head}: {why}", flush=True)

    def finish(self):
        print(f"family {self.name}: {self.passed} passed, {self.failed} failed, "
              f"worst passing error {self.worst:.1e}", flush=True)
        sys.exit(1 if self.failed else 0)


# ---- inputs, parameters and gradients ---------------------------------------------------------


def randn(*shape, dtype, scale=1.0):
    return torch.randn(tuple(shape), dtype=torch.float64).mul(scale).to(dtype)


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def perturb_(module, scale=0.2):
    """Moves every parameter off its initial value (PyTorch starts biases at zero and norms at one,
    which would hide a bias or scale applied wrongly)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * scale)
    return module


def loss_against(outputs, gouts):
    """sum over outputs of (output * gout): backward of it gives every gradient for gout."""
    return sum((outputs[k] * gouts[k]).sum() for k in gouts)


def grads(named, prefix="grad."):
    """{prefix + name: grad} for every tensor in `named` (name -> tensor) that has one."""
    return {prefix + k: v.grad.detach().clone() for k, v in named.items() if v.grad is not None}


def k_bias_floors(theirs):
    """A key projection's bias shifts every score of a query by the same amount, which softmax
    ignores: its gradient is zero in exact arithmetic and only rounding noise on both sides. Such a
    gradient is compared against the scale of its weight's gradient instead of its own."""
    floors = {}
    for name, t in theirs.items():
        if name.startswith("grad") and name.endswith("k_proj.bias"):
            w = theirs.get(name[: -len("bias")] + "weight")
            if w is not None:
                floors[name] = w.abs().max().item()
    return floors


# ---- qkv names for PyTorch's modules ------------------------------------------------------------


def mha_to_qkv(mha, prefix=""):
    """A torch.nn.MultiheadAttention's parameters under qkv's names (q_proj/k_proj/v_proj/out_proj
    .weight/.bias; PyTorch packs the three input projections into in_proj_* when kdim == vdim ==
    embed_dim). Slices of PyTorch's tensors, so .grad of a slice is not available: see
    mha_grads_to_qkv for gradients."""
    return _mha_split(mha, prefix, lambda t: t)


def mha_grads_to_qkv(mha, prefix=""):
    return _mha_split(mha, prefix, lambda t: t.grad)


def _mha_split(mha, prefix, get):
    E = mha.embed_dim
    out = {}
    if mha.in_proj_weight is not None:
        w = get(mha.in_proj_weight)
        for i, n in enumerate("qkv"):
            out[f"{prefix}{n}_proj.weight"] = None if w is None else w[i * E : (i + 1) * E]
    else:
        for n in "qkv":
            out[f"{prefix}{n}_proj.weight"] = get(getattr(mha, f"{n}_proj_weight"))
    if mha.in_proj_bias is not None:
        b = get(mha.in_proj_bias)
        for i, n in enumerate("qkv"):
            out[f"{prefix}{n}_proj.bias"] = None if b is None else b[i * E : (i + 1) * E]
    out[f"{prefix}out_proj.weight"] = get(mha.out_proj.weight)
    if mha.out_proj.bias is not None:
        out[f"{prefix}out_proj.bias"] = get(mha.out_proj.bias)
    return {k: v.detach().clone() for k, v in out.items() if v is not None}


def encoder_layer_to_qkv(layer, prefix="", get=None):
    """torch.nn.TransformerEncoderLayer -> qkv's TransformerEncoderLayer names (values or, with
    get=grad, gradients)."""
    split = mha_grads_to_qkv if get == "grad" else mha_to_qkv
    out = split(layer.self_attn, prefix + "self_attn.")
    out.update(_plain(layer, prefix, get, {
        "linear1": "feed_forward.linear1", "linear2": "feed_forward.linear2",
        "norm1": "norm1", "norm2": "norm2"}))
    return out


def decoder_layer_to_qkv(layer, prefix="", get=None):
    """torch.nn.TransformerDecoderLayer -> qkv's names (multihead_attn is qkv's cross_attn)."""
    split = mha_grads_to_qkv if get == "grad" else mha_to_qkv
    out = split(layer.self_attn, prefix + "self_attn.")
    out.update(split(layer.multihead_attn, prefix + "cross_attn."))
    out.update(_plain(layer, prefix, get, {
        "linear1": "feed_forward.linear1", "linear2": "feed_forward.linear2",
        "norm1": "norm1", "norm2": "norm2", "norm3": "norm3"}))
    return out


def stack_to_qkv(stack, layer_fn, prefix="", get=None):
    """torch.nn.TransformerEncoder / TransformerDecoder -> qkv's names (layers.<i>., norm.)."""
    out = {}
    for i, layer in enumerate(stack.layers):
        out.update(layer_fn(layer, f"{prefix}layers.{i}.", get))
    if stack.norm is not None:
        out.update(_plain(stack, prefix, get, {"norm": "norm"}))
    return out


def _plain(module, prefix, get, names):
    out = {}
    for torch_name, qkv_name in names.items():
        sub = getattr(module, torch_name)
        for pname, p in sub.named_parameters(recurse=False):
            v = p.grad if get == "grad" else p
            if v is not None:
                out[f"{prefix}{qkv_name}.{pname}"] = v.detach().clone()
    return out


def params_in(named, prefix="param."):
    return {prefix + k: v for k, v in named.items()}


# ---- the usual case: one module, its inputs, its outputs --------------------------------------


def module_case(driver_case, meta, dtype, module, inputs, forward, names=None, extra_inputs=None):
    """Runs `module` (PyTorch) and driver case `driver_case` (qkv) on the same weights and inputs.

    inputs: name -> tensor; floating ones become leaves whose gradients are compared.
    forward(module, inputs) -> dict of named outputs, each given a random upstream gradient.
    names(module, get) -> the module's parameters (get=None) or their gradients (get="grad")
    under qkv's names; by default PyTorch's own names, which most layers share with qkv.
    extra_inputs: name -> tensor given to qkv only (as in.<name>, no gradient): masks, which the
    PyTorch side passes in its own form.
    Returns (qkv results, torch results, floors) for Family.check."""
    if module is not None:
        module.to(dtype)
    names = names or _own_names
    leaves = {k: (leaf(v.to(dtype)) if v.is_floating_point() else v) for k, v in inputs.items()}
    outs = forward(module, leaves)
    gouts = {k: randn(*v.shape, dtype=dtype) for k, v in outs.items() if v.is_floating_point()}
    loss_against(outs, gouts).backward()

    theirs = {"out." + k: v.detach() for k, v in outs.items()}
    floating = {k: v for k, v in leaves.items() if v.is_floating_point()}
    theirs.update(grads(floating, "grad.in."))
    tensors = {"in." + k: v.detach() for k, v in leaves.items()}
    tensors.update({"gout." + k: v for k, v in gouts.items()})
    tensors.update({"in." + k: v for k, v in (extra_inputs or {}).items()})
    if module is not None:
        theirs.update({"grad." + k: v for k, v in names(module, "grad").items()})
        tensors.update(params_in(names(module, None)))
    ours = run_qkv(driver_case, tensors, meta, dtype)
    return ours, theirs, k_bias_floors(theirs)


def _own_names(module, get):
    out = {}
    for k, p in module.named_parameters():
        v = p.grad if get == "grad" else p
        if v is not None:
            out[k] = v.detach().clone()
    if get is None:
        for k, b in module.named_buffers():
            out[k] = b.detach().clone()
    return out
