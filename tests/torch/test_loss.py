"""cross_entropy, nll_loss, mse_loss and binary_cross_entropy_with_logits against
torch.nn.functional: every reduction, ignore_index, label smoothing, [N, C, d] inputs."""

import torch
import torch.nn.functional as F

from parity import Family, module_case, randn

f = Family("loss")
f64, f32 = torch.float64, torch.float32


def targets(*shape, classes=5, ignored=None):
    t = torch.randint(0, classes, shape)
    if ignored is not None:
        t.view(-1)[::3] = ignored  # every third target is ignored
    return t


def cross_entropy(dtype, shape=(6,), reduction="mean", ignore_index=None, label_smoothing=0.0):
    def run():
        N, rest = shape[0], shape[1:]
        logits = randn(N, 5, *rest, dtype=dtype, scale=2.0)
        target = targets(*shape, ignored=ignore_index)
        meta = {"reduction": reduction, "label_smoothing": repr(label_smoothing)}
        kw = {"reduction": reduction, "label_smoothing": label_smoothing}
        if ignore_index is not None:
            meta["ignore_index"] = ignore_index
            kw["ignore_index"] = ignore_index
        return module_case("cross_entropy", meta, dtype, None,
                           {"logits": logits, "target": target},
                           lambda m, x: {"loss": F.cross_entropy(x["logits"], x["target"], **kw)})
    return run


for r in ("mean", "sum", "none"):
    f.case(f"cross_entropy_{r}", f64, cross_entropy(f64, reduction=r))
    f.case(f"cross_entropy_ignore_index_{r}", f64, cross_entropy(f64, reduction=r, ignore_index=2))
    f.case(f"cross_entropy_label_smoothing_{r}", f64,
           cross_entropy(f64, reduction=r, label_smoothing=0.1))
    f.case(f"cross_entropy_smoothing_and_ignore_{r}", f64,
           cross_entropy(f64, reduction=r, label_smoothing=0.2, ignore_index=-100))
f.case("cross_entropy_smoothing_and_ignored_class_1", f64,
       cross_entropy(f64, label_smoothing=0.2, ignore_index=1))
f.case("cross_entropy_spatial_NCd", f64, cross_entropy(f64, shape=(3, 4), ignore_index=0))
f.case("cross_entropy_spatial_NCd_smoothing", f64,
       cross_entropy(f64, shape=(2, 3, 2), label_smoothing=0.3, reduction="sum"))
f.case("cross_entropy_mean", f32, cross_entropy(f32))
f.case("cross_entropy_smoothing_and_ignore_mean", f32,
       cross_entropy(f32, label_smoothing=0.1, ignore_index=2))


def nll(dtype, shape=(6,), reduction="mean", ignore_index=None):
    def run():
        N, rest = shape[0], shape[1:]
        log_probs = F.log_softmax(randn(N, 5, *rest, dtype=dtype), dim=1)
        target = targets(*shape, ignored=ignore_index)
        meta = {"reduction": reduction}
        kw = {"reduction": reduction}
        if ignore_index is not None:
            meta["ignore_index"] = kw["ignore_index"] = ignore_index
        return module_case("nll_loss", meta, dtype, None,
                           {"log_probs": log_probs, "target": target},
                           lambda m, x: {"loss": F.nll_loss(x["log_probs"], x["target"], **kw)})
    return run


for r in ("mean", "sum", "none"):
    f.case(f"nll_loss_{r}", f64, nll(f64, reduction=r))
    f.case(f"nll_loss_ignore_index_{r}", f64, nll(f64, reduction=r, ignore_index=3))
f.case("nll_loss_spatial_NCd", f64, nll(f64, shape=(3, 4)))
f.case("nll_loss_mean", f32, nll(f32))


def pointwise(dtype, kind, reduction):
    def run():
        if kind == "mse_loss":
            inputs = {"input": randn(3, 4, dtype=dtype), "target": randn(3, 4, dtype=dtype)}
            fn = lambda x: F.mse_loss(x["input"], x["target"], reduction=reduction)
        else:
            inputs = {"logits": randn(3, 4, dtype=dtype, scale=3.0),
                      "target": torch.rand(3, 4, dtype=torch.float64).to(dtype)}
            fn = lambda x: F.binary_cross_entropy_with_logits(x["logits"], x["target"],
                                                              reduction=reduction)
        return module_case(kind, {"reduction": reduction}, dtype, None, inputs,
                           lambda m, x: {"loss": fn(x)})
    return run


for kind in ("mse_loss", "bce_with_logits"):
    for r in ("mean", "sum", "none"):
        f.case(f"{kind}_{r}", f64, pointwise(f64, kind, r))
    f.case(f"{kind}_mean", f32, pointwise(f32, kind, "mean"))

f.finish()
