"""qkv <-> PyTorch, with nothing beyond torch and numpy: safetensors files (load_file, save_file)
and run folders (load_run, save_run, translate, classify, predict; below).

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


# ---- run folders <-> PyTorch modules ---------------------------------------------------------
# A qkv run folder holds config.json (how it was trained), model.json ({"architecture", "config",
# and "decode_max_len" for translation or "labels" for classifiers}), the vocabulary files of text
# models and model.safetensors. load_run builds the equivalent torch module
# (python/qkv_torch_models) and loads the weights into it; save_run writes one back so that
# `qkv translate` and `qkv eval` read it. docs/NN.md tables the parameter names of both sides.

from qkv_torch_models import models as _models  # noqa: E402  (the safetensors half stands alone)
from qkv_torch_models import names as _names  # noqa: E402
from qkv_torch_models.vocab import BOS, EOS, PAD, Vocab  # noqa: E402,F401

MODEL_FILE, MODEL_JSON, CONFIG_JSON = "model.safetensors", "model.json", "config.json"
BEST_MODEL_FILE = "best.safetensors"  # the best validation model (train/trainer/best_model.h)
_VOCAB_FILES = {
    "Seq2SeqTransformer": ("source_vocab.json", "target_vocab.json"),
    "TransformerClassifier": ("vocab.json",),
    "CnnClassifier": (),
    "VisionTransformer": (),
}


class RunInfo:
    """What a run folder says besides its weights: model.json, config.json and the vocabularies
    (file name -> Vocab), as dicts and objects that save_run writes back unchanged."""

    def __init__(self, model_json, config, vocabs):
        self.model_json, self.config, self.vocabs = model_json, config, vocabs

    @property
    def architecture(self):
        return self.model_json["architecture"]


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: missing (is this a qkv run folder with a checkpoint?)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None


def _write_json(path, value):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def torch_state_from_qkv(tensors, module):
    """qkv's tensors by qkv name -> a state_dict for `module` (a tied generator gets its weight)."""
    state = _names.qkv_to_torch(tensors)
    if getattr(module, "config", {}).get("tie_embeddings") and "generator.weight" not in state:
        state["generator.weight"] = state["tgt_embed.weight"]
    return state


def qkv_tensors_from_torch(state, architecture_config=None):
    """A torch state_dict -> qkv's tensors by qkv name (a tied generator is stored once)."""
    state = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    if (architecture_config or {}).get("tie_embeddings"):
        state.pop("generator.weight", None)
    return _names.torch_to_qkv(state)


def load_run(run_dir, last=False):
    """The torch module equivalent to a qkv run folder's model, its weights loaded, in eval mode.
    The weights are the best validation model (best.safetensors) when the run has one, as qkv eval
    and qkv translate read them, or model.safetensors (the last checkpoint) with last=True.
    module.run is the RunInfo (model.json, config.json, vocabularies)."""
    model_json = _read_json(os.path.join(run_dir, MODEL_JSON))
    architecture = model_json.get("architecture")
    module = _models.build(architecture, model_json.get("config", {}))
    weights = MODEL_FILE
    if not last and os.path.exists(os.path.join(run_dir, BEST_MODEL_FILE)):
        weights = BEST_MODEL_FILE
    tensors, _ = load_file(os.path.join(run_dir, weights))
    result = module.load_state_dict(torch_state_from_qkv(tensors, module), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(f"{run_dir}/{weights} does not fit {architecture} of {MODEL_JSON}: "
                         f"missing {result.missing_keys}, unexpected {result.unexpected_keys}")
    vocabs = {}
    for name in _VOCAB_FILES[architecture]:
        path = os.path.join(run_dir, name)
        vocabs[name] = Vocab.from_json(_read_json(path), path)
    config = _read_json(os.path.join(run_dir, CONFIG_JSON))
    module.run = RunInfo(model_json, config, vocabs)
    return module.eval()


# model.json's Seq2SeqTransformer fields and the config.json options that build them
# (train/trainer/translator.cpp, seq2seq_config): qkv refuses a run whose config.json would build
# another model than its model.json describes.
_SEQ2SEQ_OPTIONS = {"d_model": "d_model", "num_heads": "heads", "dim_feedforward": "ff_dim",
                    "dropout": "dropout", "positional": "positional"}


def _config_for(architecture, config, model_json):
    """`config` with the options that build the model set from model_json, so the two agree."""
    if architecture != "Seq2SeqTransformer":
        return config
    m = model_json["config"]
    config = dict(config)
    for field, option in _SEQ2SEQ_OPTIONS.items():
        if field in m:
            config[option] = m[field]
    if m.get("num_encoder_layers") != m.get("num_decoder_layers"):
        raise ValueError("save_run: qkv's config.json has one `layers` for both stacks; this model "
                         f"has {m.get('num_encoder_layers')} encoder and "
                         f"{m.get('num_decoder_layers')} decoder layers")
    config["layers"] = m["num_encoder_layers"]
    return config


def save_run(module_or_state_dict, run_dir, model_json=None, config=None, vocabs=None):
    """Writes a qkv run folder: model.safetensors (qkv's names), model.json, config.json and the
    vocabularies (and removes a best.safetensors there, which qkv would read instead). A module from load_run brings its own RunInfo; a bare state_dict (torch names, as
    the modules of qkv_torch_models have them) needs model_json, config and vocabs (file name ->
    Vocab) given. The weights are first loaded, strictly, into the module model_json describes, so
    a state_dict that does not fit is refused here rather than by qkv."""
    run = getattr(module_or_state_dict, "run", None)
    model_json = model_json or (run and run.model_json)
    config = config if config is not None else (run and run.config)
    vocabs = vocabs if vocabs is not None else (run and run.vocabs)
    if not model_json or config is None or vocabs is None:
        raise ValueError("save_run: a state_dict needs model_json, config and vocabs")
    state = module_or_state_dict
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    architecture = model_json["architecture"]
    fit = _models.build(architecture, model_json["config"]).load_state_dict(state, strict=False)
    if fit.missing_keys or fit.unexpected_keys:
        raise ValueError(f"save_run: the state_dict does not fit {architecture}: missing "
                         f"{fit.missing_keys}, unexpected {fit.unexpected_keys}")
    missing = [n for n in _VOCAB_FILES[architecture] if n not in vocabs]
    if missing:
        raise ValueError(f"save_run: {architecture} needs the vocabularies {', '.join(missing)}")
    os.makedirs(run_dir, exist_ok=True)
    tensors = qkv_tensors_from_torch(state, model_json["config"])
    save_file(os.path.join(run_dir, MODEL_FILE), tensors)
    # qkv reads best.safetensors before model.safetensors: one left from a run would hide these.
    if os.path.exists(os.path.join(run_dir, BEST_MODEL_FILE)):
        os.remove(os.path.join(run_dir, BEST_MODEL_FILE))
    _write_json(os.path.join(run_dir, MODEL_JSON), model_json)
    _write_json(os.path.join(run_dir, CONFIG_JSON), _config_for(architecture, config, model_json))
    for name in _VOCAB_FILES[architecture]:
        v = vocabs[name]
        _write_json(os.path.join(run_dir, name), v.to_json() if isinstance(v, Vocab) else v)


def source_batch(texts, vocab, max_len):
    """Token ids [B, S] and pad mask [B, S] (True = pad) as qkv's make_batch builds them: each text
    encoded, cut to max_len tokens, padded with PAD on the right."""
    rows = [vocab.encode(t)[:max_len] if max_len > 0 else vocab.encode(t) for t in texts]
    width = max([1] + [len(r) for r in rows])
    ids = torch.full((len(rows), width), PAD, dtype=torch.int64)
    pad = torch.ones(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.int64)
        pad[i, : len(r)] = False
    return ids, pad


@torch.no_grad()
def translate(module, texts):
    """Greedy translations of `texts` by a translation module from load_run, as `qkv translate`
    prints them; like it, refuses an empty text or one longer than the run's max_len."""
    run = module.run
    source, target = run.vocabs["source_vocab.json"], run.vocabs["target_vocab.json"]
    max_len = run.config.get("max_len", 128)
    for i, text in enumerate(texts, 1):  # qkv's Translator::check_inputs, word for word
        tokens = len(source.encode(text))
        if tokens == 0:
            raise ValueError(f"translate: text {i} is empty: nothing to translate")
        if tokens > max_len:
            raise ValueError(f"translate: text {i} has {tokens} tokens, more than the model's "
                             f"max_len of {max_len} (config.json of the run)")
    src, pad = source_batch(texts, source, max_len)
    out = module.greedy_decode(src, pad, BOS, EOS, run.model_json.get("decode_max_len", 64))
    return [target.decode(row) for row in out.tolist()]


@torch.no_grad()
def classify(module, inputs):
    """Logits [B, classes] of a classifier from load_run: `inputs` are texts for a
    TransformerClassifier (an empty one is refused), float images [B, C, H, W] in [0, 1] for the
    image models."""
    if module.run.architecture == "TransformerClassifier":
        vocab = module.run.vocabs["vocab.json"]
        for i, text in enumerate(inputs, 1):  # all padding: NaN in torch, zeros in qkv
            if not vocab.encode(text):
                raise ValueError(f"classify: text {i} is empty: nothing to classify")
        ids, pad = source_batch(inputs, vocab, module.run.config.get("max_len", 128))
        return module(ids, pad)
    return module(inputs)


def predict(module, inputs):
    """Class indices (the first largest logit, as qkv's accuracy counts them)."""
    return classify(module, inputs).argmax(dim=-1).tolist()
