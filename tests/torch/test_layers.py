"""Linear, LayerNorm, Embedding, ReLU, GELU, Sequential, Identity and Dropout against PyTorch:
outputs and every gradient."""

import torch
import torch.nn.functional as F

from parity import Family, module_case, perturb_, randn, run_qkv

f = Family("layers")
f64, f32 = torch.float64, torch.float32


def linear(dtype, bias, shape):
    def run():
        m = perturb_(torch.nn.Linear(5, 3, bias=bias))
        return module_case("linear", {"in_features": 5, "out_features": 3, "bias": bias}, dtype,
                           m, {"x": randn(*shape, 5, dtype=dtype)}, lambda m, x: {"y": m(x["x"])})
    return run


f.case("linear_bias_3d", f64, linear(f64, True, (2, 4)))
f.case("linear_no_bias_2d", f64, linear(f64, False, (4,)))
f.case("linear_bias_3d", f32, linear(f32, True, (2, 4)))


def layer_norm(dtype, shape, affine=True, eps=1e-5):
    def run():
        m = torch.nn.LayerNorm(shape, eps=eps, elementwise_affine=affine)
        perturb_(m)
        meta = {"normalized_dims": len(shape), "eps": repr(eps), "elementwise_affine": affine}
        meta.update({f"normalized_shape.{i}": n for i, n in enumerate(shape)})
        x = randn(2, 3, *shape, dtype=dtype, scale=2.0) + 0.5
        return module_case("layer_norm", meta, dtype, m, {"x": x}, lambda m, x: {"y": m(x["x"])})
    return run


f.case("layer_norm_last_dim", f64, layer_norm(f64, [6]))
f.case("layer_norm_two_dims_eps", f64, layer_norm(f64, [3, 4], eps=1e-3))
f.case("layer_norm_no_affine", f64, layer_norm(f64, [6], affine=False))
f.case("layer_norm_last_dim", f32, layer_norm(f32, [6]))


def embedding(dtype, padding_idx=None, padding_row_nonzero=False):
    def run():
        m = torch.nn.Embedding(7, 4, padding_idx=padding_idx)
        if padding_row_nonzero:
            # A loaded checkpoint may hold any value in the padding row; PyTorch looks it up like
            # any other row (padding_idx only stops its gradient).
            with torch.no_grad():
                m.weight[padding_idx] = torch.arange(1.0, 5.0)
        ids = torch.tensor([[0, 2, 2, 6], [1, 3, 0, 5]])
        meta = {"num_embeddings": 7, "embedding_dim": 4}
        if padding_idx is not None:
            meta["padding_idx"] = padding_idx
        return module_case("embedding", meta, dtype, m, {"ids": ids},
                           lambda m, x: {"y": m(x["ids"])})
    return run


f.case("embedding_repeated_ids", f64, embedding(f64))
f.case("embedding_padding_idx_zero_row", f64, embedding(f64, padding_idx=0))
f.case("embedding_padding_idx_loaded_row", f64,
       embedding(f64, padding_idx=0, padding_row_nonzero=True))
f.case("embedding_repeated_ids", f32, embedding(f32))


def activation(dtype, kind):
    fn = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}
    def run():
        x = randn(3, 5, dtype=dtype, scale=2.0)
        return module_case("activation", {"activation": kind}, dtype, None, {"x": x},
                           lambda m, x: {"y": fn[kind](x["x"])})
    return run


for kind in ("relu", "gelu", "gelu_tanh"):
    f.case(kind, f64, activation(f64, kind))
    f.case(kind, f32, activation(f32, kind))



def sequential(dtype):
    def run():
        m = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Identity(), torch.nn.Linear(6, 3), torch.nn.GELU())
        perturb_(m).eval()
        return module_case("sequential", {}, dtype, m, {"x": randn(4, 5, dtype=dtype)},
                           lambda m, x: {"y": m(x["x"])})
    return run


f.case("sequential_linear_relu_dropout_eval_identity_gelu", f64, sequential(f64))
f.case("sequential_linear_relu_dropout_eval_identity_gelu", f32, sequential(f32))


def dropout_train(dtype, p):
    """qkv draws its own mask (its generator is not PyTorch's), so PyTorch recomputes
    F.dropout's definition on that mask: kept values scaled by 1 / (1 - p), the same scaling in
    the gradient, and a dropped fraction within 5 standard deviations of p."""

    def run():
        x = randn(100, 100, dtype=dtype) + 3.0  # no input is exactly zero
        gout = randn(100, 100, dtype=dtype)
        ours = run_qkv("dropout", {"in.x": x, "gout.y": gout}, {"p": repr(p)}, dtype)
        kept = ours["out.y"] != 0
        theirs = {"out.y": x * kept / (1 - p), "grad.in.x": gout * kept / (1 - p)}
        dropped = 1 - kept.double().mean().item()
        sigma = (p * (1 - p) / x.numel()) ** 0.5
        if abs(dropped - p) > 5 * sigma:
            theirs["dropped_fraction"] = torch.tensor(p, dtype=torch.float64)
            ours["dropped_fraction"] = torch.tensor(dropped, dtype=torch.float64)
        return ours, theirs, {}
    return run


f.case("dropout_train_p0.3", f64, dropout_train(f64, 0.3))
f.case("dropout_train_p0.7", f32, dropout_train(f32, 0.7))

f.finish()
