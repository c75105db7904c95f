"""qkv <-> PyTorch, with nothing beyond torch and numpy.

Debian ships no `safetensors` Python package, so this module reads and writes the format itself
(https://github.com/huggingface/safetensors describes it): 8 bytes little-endian header length N,
N bytes of JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte
offsets into the data that follows) and an optional "__metadata__" object of strings, then the raw
little-endian tensor bytes. It is the same format qkv's nn/safetensors.cpp writes.
"""

import json
import os
import struct

import numpy as np
import torch

# safetensors dtype name -> (torch dtype, bytes per element)
_DTYPES = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I8": (torch.int8, 1),
    "BOOL": (torch.bool, 1),
}
_NAMES = {dtype: name for name, (dtype, _) in _DTYPES.items()}


def load_file(path):
    """Returns (tensors, metadata): a dict name -> CPU torch.Tensor, and the metadata dict."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} exceeds the file")

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError(f"{path}: duplicate key in the header")
        return dict(pairs)

    header = json.loads(data[8 : 8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    metadata = header.pop("__metadata__", {}) or {}
    body = data[8 + n :]
    tensors = {}
    for name, entry in header.items():
        if entry["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has unknown dtype {entry['dtype']}")
        dtype, size = _DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        shape = list(entry["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * size or end > len(body) or begin > end:
            raise ValueError(f"{path}: tensor '{name}' spans [{begin}, {end}) of {len(body)} bytes")
        raw = bytearray(body[begin:end])  # a writable copy: torch.frombuffer wants one
        if count == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=dtype).reshape(shape).clone()
        tensors[name] = t
    return tensors, metadata


def save_file(path, tensors, metadata=None):
    """Writes a dict name -> tensor atomically (a temporary file, then rename), names sorted."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in _NAMES:
            raise ValueError(f"save_file: tensor '{name}' has dtype {t.dtype}, not one qkv reads")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": _NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned, as the format recommends
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
