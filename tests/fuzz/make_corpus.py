#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/<loader>/: small valid files of each format and a
few edge cases. Regression inputs (files that once crashed a loader) are committed by hand next to
them as regression_*, and this script leaves them alone. Run it from anywhere; it rewrites only
the seed_* files."""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(loader, name, data):
    folder = os.path.join(HERE, "corpus", loader)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    # mtime=0 keeps gzip output byte-identical from one run to the next
    with open(os.path.join(folder, "seed_" + name), "wb") as f:
        f.write(data)


def safetensors(header, data=b""):
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def idx(dims, payload, type_code=8):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def gz(data):
    return gzip.compress(data, mtime=0)


# ---- safetensors
write("safetensors", "two_tensors", safetensors(
    {"__metadata__": {"format": "pt"},
     "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
     "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}},
    struct.pack("<4f", 1, 2, 3, 4) + struct.pack("<q", -7)))
write("safetensors", "all_dtypes", safetensors(
    {"a": {"dtype": "F64", "shape": [], "data_offsets": [0, 8]},
     "b": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]},
     "c": {"dtype": "BOOL", "shape": [3], "data_offsets": [12, 15]},
     "d": {"dtype": "F32", "shape": [0, 3], "data_offsets": [15, 15]}},
    struct.pack("<d", 2.5) + b"\x80\x3f\x00\x40" + b"\x01\x00\x01"))
write("safetensors", "empty_header", safetensors({}))
write("safetensors", "huge_header_length", struct.pack("<Q", 2**63) + b"{}")
write("safetensors", "short", b"\x02\x00")

# ---- config (the JSON of --config)
with open(os.path.join(ROOT, "train", "configs", "dates.json"), "rb") as f:
    write("config", "dates.json", f.read())
write("config", "every_kind.json", json.dumps(
    {"task": "pairs", "data": "pairs.tsv", "tokenizer": "whitespace", "seed": 18446744073709551615,
     "lr": 1e-4, "bucket_by_length": False, "channels": "8,16", "device": "cuda:1"}))
write("config", "empty.json", "{}")
write("config", "misspelled.json", '{"learning_rate": 0.1}')
write("config", "array.json", "[1, 2]")

# ---- idx (Fashion-MNIST files)
write("idx", "images.gz", gz(idx([2, 3, 4], bytes(range(24)))))
write("idx", "labels.gz", gz(idx([3], bytes([9, 0, 4]))))
write("idx", "plain_not_gzipped", idx([2, 2], bytes(4)))
write("idx", "truncated.gz", gz(idx([2, 3, 4], bytes(10))))
write("idx", "float_type.gz", gz(idx([2], bytes(8), type_code=0x0D)))

# ---- tsv (pairs.tsv and labels.tsv: each input is read both ways)
write("tsv", "pairs", "hello\tbonjour\r\n\nthank you\tmerci\tbeaucoup\n")
write("tsv", "labels", "pos\tgreat film\nneg\tdull\n\npos\tloved it\r\n")
write("tsv", "no_tab", "a line without a tab\n")
write("tsv", "one_label", "x\tone\nx\ttwo\n")
write("tsv", "empty_fields", "\tno source\nno target\t\n")

# ---- vocab (source_vocab.json, vocab.json)
specials = ["<pad>", "<s>", "</s>", "<unk>"]
write("vocab", "char.json", json.dumps({"tokenizer": "char", "tokens": specials + list("abc -")}))
write("vocab", "whitespace.json", json.dumps({"tokenizer": "whitespace",
                                              "tokens": specials + ["the", "cat", "sat"]}))
write("vocab", "duplicate.json", json.dumps({"tokenizer": "char", "tokens": specials + ["a", "a"]}))
write("vocab", "bad_special.json", json.dumps({"tokenizer": "char", "tokens": ["a"] * 5}))

# ---- run_dir (model.json of both kinds, trainer_state.json, metrics.jsonl)
seq2seq = {"src_vocab": 20, "tgt_vocab": 16, "d_model": 8, "num_heads": 2, "num_encoder_layers": 1,
           "num_decoder_layers": 1, "dim_feedforward": 16, "dropout": 0.1, "max_len": 34,
           "positional": "sinusoidal", "norm_first": False, "tie_embeddings": False, "pad_id": 0,
           "checkpoint_activations": False}
write("run_dir", "translator_model.json", json.dumps(
    {"architecture": "Seq2SeqTransformer", "config": seq2seq, "decode_max_len": 20}, indent=2))
write("run_dir", "text_classifier_model.json", json.dumps(
    {"architecture": "TransformerClassifier", "labels": ["neg", "pos"],
     "config": {"vocab": 30, "num_classes": 2, "d_model": 8, "num_heads": 2, "num_layers": 1,
                "dim_feedforward": 16, "dropout": 0.1, "max_len": 32, "positional": "rope",
                "norm_first": True, "pooling": "mean"}}))
write("run_dir", "cnn_model.json", json.dumps(
    {"architecture": "CnnClassifier", "labels": [str(i) for i in range(3)],
     "config": {"in_channels": 1, "image_size": 8, "num_classes": 3, "channels": [4, 8],
                "attention": "cbam", "reduction": 2}}))
write("run_dir", "vit_model.json", json.dumps(
    {"architecture": "VisionTransformer", "labels": ["a", "b"],
     "config": {"in_channels": 1, "image_size": 8, "patch_size": 4, "num_classes": 2,
                "d_model": 8, "num_heads": 2, "num_layers": 1, "dim_feedforward": 16,
                "dropout": 0.0}}))
write("run_dir", "trainer_state.json", json.dumps(
    {"step": 1500, "generator_offset": 123456789, "best_metric": 0.98}, indent=2))
write("run_dir", "metrics.jsonl", "\n".join(json.dumps(r) for r in [
    {"step": 50, "loss": 2.5, "lr": 0.001}, {"step": 100, "loss": 1.9},
    {"step": 100, "valid_loss": 2.0, "exact_match": 0.1}]) + "\n")

# ---- dictionaries (libFuzzer -dict): the words of each format, so mutations reach the checks
# behind the keys instead of spending millions of runs guessing "data_offsets" byte by byte.
JSON = ['{', '}', '[', ']', ':', ',', '"', 'true', 'false', 'null', '-1', '0', '1e999', '-1e999',
        '1.5', '18446744073709551615', '9223372036854775808', '-9223372036854775809',
        '4294967296', '\\u0000']


def write_dict(loader, words):
    folder = os.path.join(HERE, "dict")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, loader + ".dict"), "w") as f:
        for w in words:
            escaped = "".join("\\x%02X" % ord(c) if c in '\\"' or not c.isprintable() else c
                              for c in w)
            f.write('"' + escaped + '"\n')


def quoted(words):
    return ['"' + w + '"' for w in words]


with open(os.path.join(ROOT, "train", "config.cpp")) as f:
    import re
    config_keys = re.findall(r'\{"(\w+)",\s*&C::', f.read())
write_dict("safetensors", JSON + quoted(["dtype", "shape", "data_offsets", "__metadata__", "F32",
                                         "F64", "I64", "BF16", "BOOL", "F16"]))
write_dict("config", JSON + quoted(config_keys))
write_dict("vocab", JSON + quoted(["tokenizer", "tokens", "char", "whitespace"] + specials))
write_dict("run_dir", JSON + quoted(["architecture", "config", "labels", "decode_max_len",
                                     "Seq2SeqTransformer", "TransformerClassifier", "CnnClassifier",
                                     "VisionTransformer", "step", "generator_offset",
                                     "best_metric", "loss", "valid_loss"] + list(seq2seq) +
                                    ["vocab", "num_classes", "num_layers", "pooling", "in_channels",
                                     "image_size", "channels", "attention", "reduction",
                                     "patch_size", "cls", "mean", "none", "se", "cbam", "rope",
                                     "alibi", "learned", "relative"]))
write_dict("tsv", ["\t", "\r\n", "\n", " ", "\t\t"])

# ---- overrides (command-line --key value pairs, one "key value" per line)
write("overrides", "training", "steps 500\nlr 0.001\nwarmup 50\nschedule cosine\n")
write("overrides", "model", "d_model 64\nheads 4\nlayers 2\nff_dim 128\npositional rope\n")
write("overrides", "classifier", "task fashion-mnist\nmodel cnn\nchannels [16,32]\nattention cbam\n")
write("overrides", "bad_values", "steps -3\nlr abc\nunknown_key 1\n")
write("overrides", "strings", "out runs/x\ndevice cuda\nprecision bf16\n")
write_dict("overrides", config_keys + [" ", "\n", "true", "false", "-1", "0", "1e999", "[", "]",
                                       ",", '"', "18446744073709551615"])
