"""MultiheadAttention against torch.nn.MultiheadAttention (batch first): every mask kind, self and
cross attention, kdim/vdim, bias off, weights averaged or per head or not asked for (qkv then runs
its memory-efficient kernel). No query has every key blocked: PyTorch gives NaN there and qkv
zeros, a documented difference (nn/attention.h)."""

import torch

from parity import Family, mha_grads_to_qkv, mha_to_qkv, module_case, perturb_, randn

f = Family("attention")
f64, f32 = torch.float64, torch.float32
E, H, B = 8, 2, 2


def names(m, get):
    return mha_grads_to_qkv(m) if get == "grad" else mha_to_qkv(m)


def bool_attn_mask(T, S, batch_heads=None):
    """True = blocked, about a third of the entries, never key 0 (so no row is fully blocked)."""
    shape = (T, S) if batch_heads is None else (batch_heads, T, S)
    m = torch.rand(*shape) < 0.35
    m[..., 0] = False
    return m


def float_attn_mask(T, S, batch_heads=None):
    """Additive: a bias everywhere and -inf on some entries (never key 0)."""
    m = torch.randn(*((T, S) if batch_heads is None else (batch_heads, T, S)), dtype=torch.float64)
    return m.masked_fill(bool_attn_mask(T, S, batch_heads), float("-inf"))


def key_padding(S, as_float=False):
    """The second sequence is two keys shorter."""
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[1, S - 2 :] = True
    if as_float:
        return torch.zeros(B, S, dtype=torch.float64).masked_fill(pad, float("-inf"))
    return pad


def mha(dtype, T=4, S=4, self_attn=True, kdim=None, vdim=None, bias=True, need_weights=True,
        average=True, kpm=None, attn_mask=None, qkv_attn_mask=None, is_causal=False):
    """attn_mask goes to PyTorch; qkv_attn_mask (default: the same) to qkv; with is_causal qkv is
    asked for its causal mask while PyTorch gets the equivalent bool mask."""

    def run():
        m = perturb_(torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True, kdim=kdim,
                                                 vdim=vdim))
        inputs = {"query": randn(B, T, E, dtype=dtype)}
        if not self_attn:
            inputs["key"] = randn(B, S, kdim or E, dtype=dtype)
            inputs["value"] = randn(B, S, vdim or E, dtype=dtype)
        torch_mask = attn_mask
        if is_causal:
            torch_mask = torch.ones(T, S, dtype=torch.bool).triu(1)
        if torch_mask is not None and torch_mask.is_floating_point():
            torch_mask = torch_mask.to(dtype)
        torch_kpm = kpm.to(dtype) if kpm is not None and kpm.is_floating_point() else kpm

        def forward(m, x):
            k = x["query"] if self_attn else x["key"]
            v = x["query"] if self_attn else x["value"]
            out, w = m(x["query"], k, v, key_padding_mask=torch_kpm, need_weights=need_weights,
                       attn_mask=torch_mask, average_attn_weights=average)
            return {"output": out, "weights": w} if need_weights else {"output": out}

        meta = {"embed_dim": E, "num_heads": H, "bias": bias, "self": self_attn,
                "need_weights": need_weights, "average_attn_weights": average,
                "is_causal": is_causal}
        if kdim:
            meta["kdim"] = kdim
        if vdim:
            meta["vdim"] = vdim
        extra = {}
        if kpm is not None:
            extra["key_padding_mask"] = torch_kpm
        qkv_mask = qkv_attn_mask if qkv_attn_mask is not None else attn_mask
        if qkv_mask is not None:
            extra["attn_mask"] = qkv_mask.to(dtype) if qkv_mask.is_floating_point() else qkv_mask
        # Masks are inputs of the qkv case but not leaves: pass them through module_case's inputs
        # as non-floating or detached tensors.
        return module_case("multihead_attention", meta, dtype, m, inputs,
                           lambda m, x: forward(m, x), names, extra_inputs=extra)

    return run


for dtype in (f64, f32):
    f.case("self_no_mask_weights", dtype, mha(dtype))
    f.case("self_no_mask_no_weights", dtype, mha(dtype, need_weights=False))
f.case("self_per_head_weights", f64, mha(f64, average=False))
f.case("self_bool_key_padding", f64, mha(f64, kpm=key_padding(4)))
f.case("self_bool_key_padding_no_weights", f64, mha(f64, kpm=key_padding(4), need_weights=False))
f.case("self_float_key_padding", f64, mha(f64, kpm=key_padding(4, as_float=True)))
f.case("self_bool_attn_mask", f64, mha(f64, attn_mask=bool_attn_mask(4, 4)))
f.case("self_bool_attn_mask_no_weights", f64,
       mha(f64, attn_mask=bool_attn_mask(4, 4), need_weights=False))
f.case("self_float_attn_mask", f64, mha(f64, attn_mask=float_attn_mask(4, 4)))
f.case("self_float_attn_mask_no_weights", f64,
       mha(f64, attn_mask=float_attn_mask(4, 4), need_weights=False))
f.case("self_bool_attn_mask_per_batch_head", f64, mha(f64, attn_mask=bool_attn_mask(4, 4, B * H)))
f.case("self_float_attn_mask_per_batch_head", f64,
       mha(f64, attn_mask=float_attn_mask(4, 4, B * H)))
mask4 = bool_attn_mask(4, 4, B * H)
f.case("self_bool_attn_mask_4d", f64,
       mha(f64, attn_mask=mask4, qkv_attn_mask=mask4.reshape(B, H, 4, 4)))
f.case("self_causal", f64, mha(f64, is_causal=True))
f.case("self_causal_no_weights", f64, mha(f64, is_causal=True, need_weights=False))
f.case("self_causal_and_key_padding", f64, mha(f64, is_causal=True, kpm=key_padding(4)))
f.case("self_bool_key_padding_float_attn_mask", f64,
       mha(f64, kpm=key_padding(4), attn_mask=float_attn_mask(4, 4)))
f.case("self_bool_key_padding_bool_attn_mask_no_weights", f64,
       mha(f64, kpm=key_padding(4), attn_mask=bool_attn_mask(4, 4), need_weights=False))
f.case("self_no_bias", f64, mha(f64, bias=False))
for dtype in (f64, f32):
    f.case("cross", dtype, mha(dtype, T=3, S=5, self_attn=False))
f.case("cross_no_weights", f64, mha(f64, T=3, S=5, self_attn=False, need_weights=False))
f.case("cross_key_padding", f64, mha(f64, T=3, S=5, self_attn=False, kpm=key_padding(5)))
f.case("cross_attn_mask", f64,
       mha(f64, T=3, S=5, self_attn=False, attn_mask=float_attn_mask(3, 5)))
f.case("cross_kdim_vdim", f64, mha(f64, T=3, S=5, self_attn=False, kdim=6, vdim=3))
f.case("cross_kdim_vdim_no_bias_no_weights", f64,
       mha(f64, T=3, S=5, self_attn=False, kdim=6, vdim=3, bias=False, need_weights=False))
f.case("cross_kdim_vdim", f32, mha(f32, T=3, S=5, self_attn=False, kdim=6, vdim=3))

f.finish()
