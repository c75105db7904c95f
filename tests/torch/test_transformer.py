"""TransformerEncoderLayer, TransformerDecoderLayer and their stacks against PyTorch's (batch
first, dropout 0): post-norm and pre-norm, relu and gelu, padding and attention masks."""

import torch

from parity import (Family, decoder_layer_to_qkv, encoder_layer_to_qkv, module_case, perturb_,
                    randn, stack_to_qkv)

f = Family("transformer")
f64, f32 = torch.float64, torch.float32
D, H, FF, B, T, S = 8, 2, 16, 2, 4, 5


def padding(B, L):
    """The second sequence is two positions shorter (never the first position: no query may have
    every key blocked)."""
    pad = torch.zeros(B, L, dtype=torch.bool)
    pad[1, L - 2 :] = True
    return pad


def causal(L):
    return torch.ones(L, L, dtype=torch.bool).triu(1)


def options(activation, norm_first):
    return {"d_model": D, "num_heads": H, "dim_feedforward": FF, "activation": activation,
            "norm_first": norm_first}


def torch_kwargs(activation, norm_first):
    return dict(d_model=D, nhead=H, dim_feedforward=FF, dropout=0.0, activation=activation,
                batch_first=True, norm_first=norm_first)


def encoder_layer(dtype, activation="relu", norm_first=False, pad=False, src_mask=None,
                  is_causal=False):
    def run():
        m = perturb_(torch.nn.TransformerEncoderLayer(**torch_kwargs(activation, norm_first)))
        kpm = padding(B, S) if pad else None
        mask = causal(S) if is_causal else src_mask
        meta = dict(options(activation, norm_first), is_causal=is_causal)
        extra = {}
        if pad:
            extra["src_key_padding_mask"] = kpm
        if src_mask is not None:
            extra["src_mask"] = src_mask.to(dtype) if src_mask.is_floating_point() else src_mask
        torch_mask = mask.to(dtype) if mask is not None and mask.is_floating_point() else mask
        return module_case(
            "encoder_layer", meta, dtype, m, {"src": randn(B, S, D, dtype=dtype)},
            lambda m, x: {"y": m(x["src"], src_mask=torch_mask, src_key_padding_mask=kpm)},
            lambda m, get: encoder_layer_to_qkv(m, "", get), extra)
    return run


def decoder_layer(dtype, activation="relu", norm_first=False, tgt_pad=False, memory_pad=False,
                  tgt_is_causal=True):
    def run():
        m = perturb_(torch.nn.TransformerDecoderLayer(**torch_kwargs(activation, norm_first)))
        tkpm = padding(B, T) if tgt_pad else None
        mkpm = padding(B, S) if memory_pad else None
        meta = dict(options(activation, norm_first), tgt_is_causal=tgt_is_causal)
        extra = {}
        if tgt_pad:
            extra["tgt_key_padding_mask"] = tkpm
        if memory_pad:
            extra["memory_key_padding_mask"] = mkpm
        tgt_mask = causal(T) if tgt_is_causal else None
        inputs = {"tgt": randn(B, T, D, dtype=dtype), "memory": randn(B, S, D, dtype=dtype)}
        return module_case(
            "decoder_layer", meta, dtype, m, inputs,
            lambda m, x: {"y": m(x["tgt"], x["memory"], tgt_mask=tgt_mask,
                                 tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm)},
            lambda m, get: decoder_layer_to_qkv(m, "", get), extra)
    return run


def stack(dtype, kind, norm_first, activation="relu", num_layers=2):
    def run():
        norm = torch.nn.LayerNorm(D) if norm_first else None
        if kind == "encoder":
            layer = torch.nn.TransformerEncoderLayer(**torch_kwargs(activation, norm_first))
            m = torch.nn.TransformerEncoder(layer, num_layers, norm=norm)
            layer_fn = encoder_layer_to_qkv
        else:
            layer = torch.nn.TransformerDecoderLayer(**torch_kwargs(activation, norm_first))
            m = torch.nn.TransformerDecoder(layer, num_layers, norm=norm)
            layer_fn = decoder_layer_to_qkv
        perturb_(m)  # the stack's layers start as copies of one layer
        meta = dict(options(activation, norm_first), num_layers=num_layers)
        if kind == "encoder":
            kpm = padding(B, S)
            return module_case(
                "encoder", meta, dtype, m, {"src": randn(B, S, D, dtype=dtype)},
                lambda m, x: {"y": m(x["src"], src_key_padding_mask=kpm)},
                lambda m, get: stack_to_qkv(m, layer_fn, "", get),
                {"src_key_padding_mask": kpm})
        tkpm, mkpm = padding(B, T), padding(B, S)
        inputs = {"tgt": randn(B, T, D, dtype=dtype), "memory": randn(B, S, D, dtype=dtype)}
        return module_case(
            "decoder", meta, dtype, m, inputs,
            lambda m, x: {"y": m(x["tgt"], x["memory"], tgt_mask=causal(T),
                                 tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm)},
            lambda m, get: stack_to_qkv(m, layer_fn, "", get),
            {"tgt_key_padding_mask": tkpm, "memory_key_padding_mask": mkpm})
    return run


for norm_first in (False, True):
    nf = "pre_norm" if norm_first else "post_norm"
    for activation in ("relu", "gelu"):
        f.case(f"encoder_layer_{nf}_{activation}", f64, encoder_layer(f64, activation, norm_first))
        f.case(f"decoder_layer_{nf}_{activation}", f64, decoder_layer(f64, activation, norm_first))
    f.case(f"encoder_layer_{nf}_padding", f64, encoder_layer(f64, norm_first=norm_first, pad=True))
    f.case(f"encoder_layer_{nf}_causal", f64,
           encoder_layer(f64, norm_first=norm_first, is_causal=True))
    f.case(f"decoder_layer_{nf}_padding", f64,
           decoder_layer(f64, norm_first=norm_first, tgt_pad=True, memory_pad=True))
    f.case(f"encoder_{nf}", f64, stack(f64, "encoder", norm_first))
    f.case(f"decoder_{nf}", f64, stack(f64, "decoder", norm_first))
f.case("encoder_layer_float_src_mask", f64,
       encoder_layer(f64, src_mask=torch.randn(S, S, dtype=torch.float64)))
f.case("encoder_layer_bool_src_mask_padding", f64,
       encoder_layer(f64, pad=True, src_mask=causal(S)))
f.case("decoder_layer_not_causal", f64, decoder_layer(f64, tgt_is_causal=False))
f.case("encoder_layer_post_norm_gelu", f32, encoder_layer(f32, "gelu"))
f.case("decoder_layer_pre_norm_relu_padding", f32,
       decoder_layer(f32, norm_first=True, tgt_pad=True, memory_pad=True))
f.case("decoder_post_norm", f32, stack(f32, "decoder", False))

f.finish()
