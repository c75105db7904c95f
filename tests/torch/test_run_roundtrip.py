#!/usr/bin/python3
"""A qkv run folder opens in PyTorch (python/qkv_torch.py), and back.

    /usr/bin/python3 tests/torch/test_run_roundtrip.py [BUILD_DIR]   (default: build)

Trains tiny runs with the qkv CLI (a dates translation with each of the five positional encodings,
two text classifiers, CNNs with SE and CBAM and a ViT on a small synthetic Fashion-MNIST folder),
loads each with qkv_torch.load_run and holds PyTorch to qkv: greedy translations identical to
`qkv translate`'s, predictions identical to qkv's, logits (from BUILD_DIR/run_logits, which loads
the run as `qkv eval` does) within 1e-5 of the largest one, test accuracy equal to `qkv eval`'s.
Then back: modules changed in PyTorch (perturbed weights, a freshly initialised model) are written
with qkv_torch.save_run, and qkv's translations, logits and accuracy on them must equal PyTorch's.
Prints one line per case and `roundtrip: N passed, M failed`; exit 0 only when none failed.
Without torch it prints that it is skipped and exits 0.
"""

import gzip
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

try:
    import torch
except ImportError:
    print("roundtrip: skipped (torch is not importable by this python)")
    print("roundtrip: 0 passed, 0 failed, 1 skipped")
    sys.exit(0)

import qkv_torch  # noqa: E402
from qkv_torch_models import models  # noqa: E402

TOLERANCE = 1e-5  # float32 logits: max |torch - qkv| <= TOLERANCE * max(1, max |qkv|)

DATES = ["25th august 2007", "1950/04/24", "06.01.1976", "thursday, may 13, 2032", "27-04-1966",
         "march 3rd, 1999", "5 jan 2010", "2001-12-31", "the 20th of march 2000", "mon, 9 nov 2043",
         "july 4, 1776", "12/11/2013", "sunday 1 february 1998", "1 oct 2020", "31.05.1989",
         "february 29, 2024", "the 2nd of june 1960", "17 sep 2005", "2019/07/08", "08-08-2008"]


class Suite:
    def __init__(self, build_dir, work):
        self.qkv = os.path.join(build_dir, "qkv")
        self.run_logits = os.path.join(build_dir, "run_logits")
        self.work = work
        self.passed = self.failed = 0

    def check(self, name, ok, detail):
        # The parity runner (tests/torch/run.sh) counts these PASS and FAIL lines.
        print(f"{'PASS' if ok else 'FAIL'} roundtrip/{name}  {detail}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def cli(self, *args):
        out = subprocess.run([self.qkv, *args], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"qkv {' '.join(args[:2])} failed ({out.returncode}): "
                               f"{out.stderr.strip()[-400:]}")
        return out.stdout

    def train(self, name, kind, *flags):
        run = os.path.join(self.work, name)
        start = time.time()
        self.cli("train", kind, "--pictures", "false", "--out", run, *flags)
        print(f"  trained {name} in {time.time() - start:.1f} s", flush=True)
        return run

    def translate(self, run, texts):
        lines = self.cli("translate", "--run", run, *texts).rstrip("\n").split("\n")
        return [line.split("\t", 1)[1] for line in lines]

    def eval_accuracy(self, run):
        # "test accuracy 0.8150 (200 examples), CnnClassifier"
        return self.cli("eval", "--run", run).split()[2]

    def logits(self, run, **inputs):
        tmp_in = os.path.join(self.work, "in.safetensors")
        tmp_out = os.path.join(self.work, "out.safetensors")
        qkv_torch.save_file(tmp_in, inputs)
        out = subprocess.run([self.run_logits, run, tmp_in, tmp_out], capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise RuntimeError(f"run_logits {run}: {out.stderr.strip()}")
        return qkv_torch.load_file(tmp_out)[0]["logits"]


def logit_error(ours, theirs):
    if ours.shape != theirs.shape:
        return float("inf")
    return float((ours - theirs).abs().max() / max(1.0, float(theirs.abs().max())))


# ---- translation ------------------------------------------------------------------------------

def check_translation(suite, name, run, module=None, texts=DATES):
    """Greedy translations identical to `qkv translate`'s; teacher-forced logits within 1e-5."""
    module = module or qkv_torch.load_run(run)
    ours, theirs = qkv_torch.translate(module, texts), suite.translate(run, texts)
    same = sum(a == b for a, b in zip(ours, theirs))
    first_bad = next((f"{t!r}: torch {a!r}, qkv {b!r}" for t, a, b in zip(texts, ours, theirs)
                      if a != b), "")
    suite.check(f"{name} translations", same == len(texts),
                f"{same}/{len(texts)} identical, e.g. {texts[0]!r} -> {ours[0]!r} {first_bad}")
    translation_logits(suite, run, module, texts)


def translation_logits(suite, run, module, texts):
    vocabs = module.run.vocabs
    src, pad = qkv_torch.source_batch(texts, vocabs["source_vocab.json"],
                                      module.run.config["max_len"])
    with torch.no_grad():
        # the greedy outputs as decoder inputs: the positions a translation visits
        tgt_in = module.greedy_decode(src, pad, qkv_torch.BOS, qkv_torch.EOS, 12)
        ours = module(src, tgt_in, pad)
    theirs = suite.logits(run, src=src, src_pad_mask=pad, tgt_in=tgt_in)
    error = logit_error(ours, theirs)
    suite.check(f"{os.path.basename(run)} logits", error <= TOLERANCE,
                f"max error {error:.2e} of max |logit| {float(theirs.abs().max()):.2f}, "
                f"shape {list(theirs.shape)}")


def perturbed(module, scale, seed):
    """The module with every floating parameter moved by N(0, scale^2): weights PyTorch changed."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * scale)
    return module


def translation_cases(suite):
    dates = suite.train("dates", "translate", "--config",
                        os.path.join(REPO, "train/configs/dates.json"), "--d-model", "32",
                        "--ff-dim", "64", "--steps", "200", "--eval-every", "1000",
                        "--train-size", "4000", "--valid-size", "50", "--test-size", "50")
    check_translation(suite, "dates (sinusoidal)", dates)
    for positional in ("learned", "relative", "rope", "alibi"):
        run = suite.train(f"dates_{positional}", "translate", "--task", "dates", "--positional",
                          positional, "--d-model", "32", "--heads", "4", "--layers", "1",
                          "--ff-dim", "64", "--dropout", "0", "--batch-size", "32",
                          "--steps", "120",
                          "--lr", "0.005", "--warmup", "10", "--eval-every", "1000",
                          "--train-size", "2000", "--valid-size", "50", "--test-size", "50")
        check_translation(suite, f"dates ({positional})", run)

    # Whitespace tokens: the target words are joined by spaces.
    run = suite.train("numbers", "translate", "--task", "numbers", "--d-model", "32", "--heads",
                      "4", "--layers", "1", "--ff-dim", "64", "--dropout", "0", "--batch-size",
                      "32", "--steps", "100", "--lr", "0.005", "--warmup", "10", "--eval-every",
                      "1000", "--train-size", "2000", "--valid-size", "50", "--test-size", "50")
    check_translation(suite, "numbers (whitespace target)", run,
                      texts=["7", "42", "129", "1047", "571972", "700000", "90", "31415"])

    # Back: weights changed in PyTorch, written by save_run, read by `qkv translate`.
    module = perturbed(qkv_torch.load_run(dates), 0.02, seed=1)
    saved = os.path.join(suite.work, "dates_from_torch")
    qkv_torch.save_run(module, saved)
    check_translation(suite, "dates perturbed in torch, saved", saved, module)
    # qkv reads the new weights, not the run they came from: its logits moved.
    src, pad = qkv_torch.source_batch(DATES, module.run.vocabs["source_vocab.json"], 128)
    tgt_in = torch.randint(4, len(module.run.vocabs["target_vocab.json"]), (len(DATES), 8),
                           generator=torch.Generator().manual_seed(3))
    moved = float((suite.logits(saved, src=src, src_pad_mask=pad, tgt_in=tgt_in) -
                   suite.logits(dates, src=src, src_pad_mask=pad, tgt_in=tgt_in)).abs().max())
    suite.check("dates saved weights are the perturbed ones", moved > 1e-2,
                f"qkv's logits moved by {moved:.3f} from the original run's")

    # Back from a bare state_dict: a model that never saw qkv (torch's initialisation).
    source = qkv_torch.load_run(os.path.join(suite.work, "dates_rope"))
    torch.manual_seed(7)
    fresh = models.build("Seq2SeqTransformer", source.run.model_json["config"])
    for p in fresh.parameters():
        if p.dim() == 1:  # torch zeroes the biases of attention; random ones test more
            torch.nn.init.normal_(p, 0, 0.1)
    saved = os.path.join(suite.work, "fresh_from_torch")
    qkv_torch.save_run(fresh.state_dict(), saved, model_json=source.run.model_json,
                       config=source.run.config, vocabs=source.run.vocabs)
    fresh.run = source.run
    check_translation(suite, "fresh torch rope model, saved", saved, fresh.eval())

    # What the CLI never trains: pre-norm stacks (final LayerNorms) and a tied generator.
    config = dict(source.run.model_json["config"], positional="learned", norm_first=True,
                  tie_embeddings=True, num_encoder_layers=2, num_decoder_layers=2)
    model_json = dict(source.run.model_json, config=config)
    torch.manual_seed(4)
    fresh = models.build("Seq2SeqTransformer", config)
    for embedding in (fresh.src_embed, fresh.tgt_embed):  # qkv's scale: std d_model^-1/2
        torch.nn.init.normal_(embedding.weight, 0, config["d_model"] ** -0.5)
    fresh = perturbed(fresh, 0.1, seed=4)  # biases and LayerNorms away from 0 and 1
    saved = os.path.join(suite.work, "prenorm_tied_from_torch")
    qkv_torch.save_run(fresh, saved, model_json=model_json, config=source.run.config,
                       vocabs=source.run.vocabs)
    fresh.run = qkv_torch.RunInfo(model_json, source.run.config, source.run.vocabs)
    check_translation(suite, "fresh torch pre-norm tied model, saved", saved, fresh.eval())
    check_translation(suite, "fresh torch pre-norm tied model, reloaded", saved)


# ---- classifiers ------------------------------------------------------------------------------

def order_texts(count, seed):
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        words = [f"w{rng.randrange(16)}" for _ in range(rng.randrange(24, 40))]
        for marker in ("A", "B"):
            for _ in range(rng.randrange(1, 4)):
                words.insert(rng.randrange(len(words) + 1), marker)
        texts.append(" ".join(words))
    return texts


def check_classifier(suite, name, run, inputs, module=None, expect_accuracy=None):
    module = module or qkv_torch.load_run(run)
    ours = qkv_torch.classify(module, inputs)
    if module.run.architecture == "TransformerClassifier":
        ids, pad = qkv_torch.source_batch(inputs, module.run.vocabs["vocab.json"],
                                          module.run.config["max_len"])
        theirs = suite.logits(run, inputs=ids, pad_mask=pad)
    else:
        theirs = suite.logits(run, inputs=inputs)
    same = int((ours.argmax(-1) == theirs.argmax(-1)).sum())
    counts = torch.bincount(theirs.argmax(-1), minlength=theirs.shape[1]).tolist()
    suite.check(f"{name} predictions", same == len(theirs),
                f"{same}/{len(theirs)} identical (qkv's per class {counts})")
    error = logit_error(ours, theirs)
    suite.check(f"{name} logits", error <= TOLERANCE,
                f"max error {error:.2e} of max |logit| {float(theirs.abs().max()):.2f}")
    return module


def write_idx(path, dims, data):
    header = struct.pack(">HBB", 0, 0x08, len(dims)) + b"".join(struct.pack(">I", d) for d in dims)
    with gzip.open(path, "wb") as f:
        f.write(header + bytes(data))


def synthetic_fashion(folder, train, test, seed=3):
    """Fashion-MNIST's four files, small: class k is a bright bar at rows 2k+3.. 2k+6 of noise,
    so a few steps learn something. Returns the test images [N, 1, 28, 28] as qkv scales them
    (byte / 255 in float64, rounded to float32) and their labels."""
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    test_pixels = test_labels = None
    for prefix, n in (("train", train), ("t10k", test)):
        labels = [rng.randrange(10) for _ in range(n)]
        pixels = []
        for k in labels:
            for row in range(28):
                bar = 2 * k + 3 <= row < 2 * k + 6
                pixels += [rng.randrange(150, 256) if bar else rng.randrange(0, 90)
                           for _ in range(28)]
        write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz"), [n, 28, 28], pixels)
        write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"), [n], labels)
        test_pixels, test_labels = pixels, labels
    images = (torch.tensor(test_pixels, dtype=torch.float64) / 255.0).float()
    return images.view(test, 1, 28, 28), torch.tensor(test_labels)


def check_eval_accuracy(suite, name, run, module, images, labels):
    """`qkv eval`'s test accuracy (the first test_size images of the test file) equals PyTorch's."""
    n = module.run.config["test_size"]
    correct = sum(p == int(l) for p, l in zip(qkv_torch.predict(module, images[:n]), labels[:n]))
    ours, theirs = f"{correct / n:.4f}", suite.eval_accuracy(run)
    suite.check(f"{name} qkv eval accuracy", ours == theirs, f"torch {ours}, qkv eval {theirs}")


def classifier_cases(suite):
    texts = order_texts(40, seed=5)
    common = ["--task", "order", "--d-model", "32", "--heads", "4", "--layers", "1", "--ff-dim",
              "64", "--dropout", "0", "--min-length", "24", "--max-length", "40", "--steps", "60",
              "--batch-size", "32", "--lr", "0.003", "--warmup", "10", "--eval-every", "1000",
              "--train-size", "1000", "--valid-size", "50", "--test-size", "50"]
    run = suite.train("order_cls", "classify", *common, "--pooling", "cls")
    check_classifier(suite, "order (cls, sinusoidal)", run, texts)
    run = suite.train("order_mean", "classify", *common, "--pooling", "mean", "--positional",
                      "relative")
    check_classifier(suite, "order (mean, relative)", run, texts)

    fashion = os.path.join(suite.work, "fashion")
    images, labels = synthetic_fashion(fashion, train=600, test=200)
    common = ["--task", "fashion-mnist", "--data", fashion, "--train-size", "500", "--valid-size",
              "100", "--test-size", "200", "--steps", "60", "--batch-size", "32", "--lr", "0.01",
              "--warmup", "5", "--eval-every", "1000"]
    runs = {}
    for name, flags in (("cnn_se", ["--model", "cnn", "--attention", "se", "--channels", "8,16"]),
                        ("cnn_cbam", ["--model", "cnn", "--attention", "cbam", "--channels",
                                      "8,16"]),
                        ("vit", ["--model", "vit", "--patch-size", "7", "--d-model", "32",
                                 "--heads", "4", "--layers", "1", "--ff-dim", "64",
                                 "--dropout", "0"])):
        runs[name] = suite.train(name, "classify", *common, *flags)
        module = check_classifier(suite, name, runs[name], images)
        check_eval_accuracy(suite, name, runs[name], module, images, labels)

    # Back: a CBAM network changed in PyTorch (BatchNorm statistics too), saved, evaluated by qkv.
    module = perturbed(qkv_torch.load_run(runs["cnn_cbam"]), 0.05, seed=2)
    for name, buffer in module.named_buffers():
        if name.endswith("running_var"):
            buffer.mul_(1.5)
    saved = os.path.join(suite.work, "cnn_cbam_from_torch")
    qkv_torch.save_run(module, saved)
    check_classifier(suite, "cnn_cbam perturbed in torch, saved", saved, images, module)
    check_eval_accuracy(suite, "cnn_cbam perturbed in torch, saved", saved, module, images, labels)


# ---- what save_run and load_run refuse --------------------------------------------------------

def refusal_cases(suite):
    run = os.path.join(suite.work, "dates_alibi")
    module = qkv_torch.load_run(run)
    state = module.state_dict()
    del state["decoder.layers.0.multihead_attn.in_proj_weight"]
    try:
        qkv_torch.save_run(state, os.path.join(suite.work, "broken"),
                           model_json=module.run.model_json, config=module.run.config,
                           vocabs=module.run.vocabs)
        message = ""
    except ValueError as e:
        message = str(e)
    suite.check("save_run refuses a state_dict missing a tensor",
                "decoder.layers.0.multihead_attn.in_proj_weight" in message,
                message.splitlines()[0][:120] if message else "no error")

    # An empty text: qkv translate and qkv_torch.translate refuse it with the same words.
    try:
        qkv_torch.translate(module, ["1 may 2001", ""])
        message = ""
    except ValueError as e:
        message = str(e)
    out = subprocess.run([suite.qkv, "translate", "--run", run, "1 may 2001", ""],
                         capture_output=True, text=True)
    suite.check("translate refuses an empty text as qkv does",
                message != "" and out.returncode == 1 and message in out.stderr,
                f"torch {message!r}; qkv (exit {out.returncode}) {out.stderr.strip()!r}")

    try:
        order = qkv_torch.load_run(os.path.join(suite.work, "order_mean"))
        qkv_torch.classify(order, ["A w1 B", " "])
        message = ""
    except ValueError as e:
        message = str(e)
    suite.check("classify refuses an empty text (torch would give NaN)",
                "text 2 is empty" in message, message or "no error")

    broken = os.path.join(suite.work, "dates_missing_tensor")
    shutil.copytree(run, broken)
    tensors, metadata = qkv_torch.load_file(os.path.join(broken, "model.safetensors"))
    del tensors["encoder.layers.0.self_attn.k_proj.bias"]
    qkv_torch.save_file(os.path.join(broken, "model.safetensors"), tensors, metadata)
    try:
        qkv_torch.load_run(broken, last=True)  # the damaged file is the last checkpoint
        message = ""
    except ValueError as e:
        message = str(e)
    suite.check("load_run refuses a file missing a tensor", "k_proj" in message,
                message[:120] if message else "no error")


def main():
    default_build = os.environ.get("QKV_BUILD_DIR", os.path.join(REPO, "build"))
    build_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else default_build)
    for tool in ("qkv", "run_logits"):
        if not os.access(os.path.join(build_dir, tool), os.X_OK):
            print(f"roundtrip: {build_dir}/{tool} not found (build the targets qkv and run_logits)")
            print("roundtrip: 0 passed, 1 failed")
            return 1
    work = tempfile.mkdtemp(prefix="qkv_roundtrip_")
    suite = Suite(build_dir, work)
    try:
        for cases in (translation_cases, classifier_cases, refusal_cases):
            try:
                cases(suite)
            except Exception as e:  # one family's crash is a failure, the others still run
                suite.check(cases.__name__, False, f"{type(e).__name__}: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"roundtrip: {suite.passed} passed, {suite.failed} failed")
    return 0 if suite.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
