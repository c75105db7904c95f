"""Parameter names: qkv's state_dict (model.safetensors) <-> the torch modules of models.py.

Every name is the same in both except inside the transformer layers (docs/NN.md has the table):

  qkv                                      torch
  <attn>.q_proj/k_proj/v_proj.weight       <attn>.in_proj_weight  (rows q, then k, then v)
  <attn>.q_proj/k_proj/v_proj.bias         <attn>.in_proj_bias
  <layer>.cross_attn.*                     <layer>.multihead_attn.*
  <layer>.feed_forward.linear1/linear2.*   <layer>.linear1/linear2.*

A tied generator (tie_embeddings) is one tensor, stored once, as tgt_embed.weight.
"""

import re

import torch

_PROJECTIONS = ("q_proj", "k_proj", "v_proj")
# (pattern, replacement) on whole dotted path components, one list per direction.
_TO_TORCH = [
    (r"\.cross_attn\.", ".multihead_attn."),
    (r"\.feed_forward\.linear([12])\.", r".linear\1."),
]
_TO_QKV = [
    (r"\.multihead_attn\.", ".cross_attn."),
    (r"\.linear([12])\.", r".feed_forward.linear\1."),
]


def _rename(name, rules):
    for pattern, replacement in rules:
        name = re.sub(pattern, replacement, name)
    return name


def qkv_to_torch(state):
    """qkv names -> torch names; q/k/v projections are stacked into in_proj_weight/_bias."""
    out, stacked = {}, {}
    for name, tensor in state.items():
        m = re.fullmatch(r"(.*)\.(q_proj|k_proj|v_proj)\.(weight|bias)", name)
        if m:
            stacked.setdefault((m.group(1), m.group(3)), {})[m.group(2)] = tensor
        else:
            out[_rename(name, _TO_TORCH)] = tensor
    for (attention, kind), parts in stacked.items():
        missing = [p for p in _PROJECTIONS if p not in parts]
        if missing:
            raise ValueError(f"{attention}: has {', '.join(sorted(parts))} but no "
                             f"{', '.join(missing)} {kind}")
        joined = torch.cat([parts[p] for p in _PROJECTIONS], 0)
        out[_rename(f"{attention}.in_proj_{kind}", _TO_TORCH)] = joined
    return out


def torch_to_qkv(state):
    """torch names -> qkv names; in_proj_weight/_bias are split into q/k/v projections."""
    out = {}
    for name, tensor in state.items():
        m = re.fullmatch(r"(.*)\.in_proj_(weight|bias)", name)
        if m:
            attention = _rename(m.group(1) + ".", _TO_QKV)[:-1]
            for projection, part in zip(_PROJECTIONS, tensor.chunk(3)):
                out[f"{attention}.{projection}.{m.group(2)}"] = part.contiguous()
        else:
            out[_rename(name, _TO_QKV)] = tensor
    return out
