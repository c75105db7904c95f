"""The whole Seq2SeqTransformer against a PyTorch twin built from torch.nn's transformer modules
and the same weights (dropout 0), in the manner of llm.c's test_gpt2: the logits, the loss and
every parameter's gradient on one batch, then 10 training steps (AdamW with clip_grad_norm_) on
fresh batches: the loss of each step and the final weights."""

import json
import math

import torch
import torch.nn.functional as F

from parity import (Family, decoder_layer_to_qkv, encoder_layer_to_qkv, k_bias_floors, perturb_,
                    run_qkv, stack_to_qkv)

f = Family("seq2seq")
f64, f32 = torch.float64, torch.float32
PAD = 0
STEPS = 10
B, S, T = 3, 6, 5


def sinusoid_table(n, d):
    """qkv's table (nn/positional.h): even columns sin(p / 10000^(i/d)), odd ones cos of it."""
    table = torch.zeros(n, d, dtype=torch.float64)
    for p in range(n):
        for i in range(0, d, 2):
            angle = p / math.pow(10000.0, i / d)
            table[p, i] = math.sin(angle)
            if i + 1 < d:
                table[p, i + 1] = math.cos(angle)
    return table


class Twin(torch.nn.Module):
    """Seq2SeqTransformer (models/seq2seq.h) written with torch.nn: embeddings scaled by
    sqrt(d_model), positions added, post- or pre-norm encoder and decoder stacks, a generator."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c["d_model"]
        self.src_embed = torch.nn.Embedding(c["src_vocab"], d)
        self.tgt_embed = torch.nn.Embedding(c["tgt_vocab"], d)
        if c["positional"] == "learned":
            self.src_pos = torch.nn.Parameter(torch.randn(c["max_len"], d) * 0.02)
            self.tgt_pos = torch.nn.Parameter(torch.randn(c["max_len"], d) * 0.02)
        else:
            self.register_buffer("table", sinusoid_table(c["max_len"], d))
        kw = dict(d_model=d, nhead=c["num_heads"], dim_feedforward=c["dim_feedforward"],
                  dropout=0.0, activation="relu", batch_first=True, norm_first=c["norm_first"])
        norm = (lambda: torch.nn.LayerNorm(d)) if c["norm_first"] else (lambda: None)
        self.encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**kw),
                                                   c["num_encoder_layers"], norm=norm())
        self.decoder = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**kw),
                                                   c["num_decoder_layers"], norm=norm())
        self.generator = torch.nn.Linear(d, c["tgt_vocab"])
        perturb_(self, 0.1)
        if c["tie_embeddings"]:
            self.generator.weight = self.tgt_embed.weight

    def positions(self, which, L):
        if self.c["positional"] == "learned":
            return getattr(self, which)[:L]
        return self.table[:L]

    def forward(self, src, tgt_in):
        scale = math.sqrt(self.c["d_model"])
        src_pad, tgt_pad = src == PAD, tgt_in == PAD
        x = self.src_embed(src) * scale + self.positions("src_pos", src.shape[1])
        memory = self.encoder(x, src_key_padding_mask=src_pad)
        y = self.tgt_embed(tgt_in) * scale + self.positions("tgt_pos", tgt_in.shape[1])
        causal = torch.ones(tgt_in.shape[1], tgt_in.shape[1], dtype=torch.bool).triu(1)
        out = self.decoder(y, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
                           memory_key_padding_mask=src_pad)
        return self.generator(out)

    def loss(self, src, tgt_in, tgt_out):
        logits = self(src, tgt_in)
        return logits, F.cross_entropy(logits.reshape(-1, self.c["tgt_vocab"]),
                                       tgt_out.reshape(-1), ignore_index=PAD)

    def qkv_names(self, get=None):
        """Parameters (or gradients, get="grad") under the names qkv's model gives them."""
        def value(p):
            v = p.grad if get == "grad" else p
            return None if v is None else v.detach().clone()

        out = {"src_embed.weight": value(self.src_embed.weight),
               "tgt_embed.weight": value(self.tgt_embed.weight),
               "generator.bias": value(self.generator.bias)}
        if not self.c["tie_embeddings"]:
            out["generator.weight"] = value(self.generator.weight)
        if self.c["positional"] == "learned":
            out["src_pos.weight"] = value(self.src_pos)
            out["tgt_pos.weight"] = value(self.tgt_pos)
        out.update(stack_to_qkv(self.encoder, encoder_layer_to_qkv, "encoder.", get))
        out.update(stack_to_qkv(self.decoder, decoder_layer_to_qkv, "decoder.", get))
        return {k: v for k, v in out.items() if v is not None}


def batch(c):
    """Random ids (never PAD) with the sequences after the first padded at the end."""
    def ids(vocab, L):
        x = torch.randint(1, vocab, (B, L))
        for b in range(1, B):
            x[b, L - b :] = PAD
        return x
    return ids(c["src_vocab"], S), ids(c["tgt_vocab"], T), ids(c["tgt_vocab"], T)


def seq2seq(dtype, positional="learned", norm_first=False, tie=False, lr=3e-3, wd=0.01,
            max_norm=0.5):
    def run():
        c = {"src_vocab": 11, "tgt_vocab": 13, "d_model": 16, "num_heads": 2,
             "num_encoder_layers": 2, "num_decoder_layers": 2, "dim_feedforward": 32,
             "dropout": 0.0, "max_len": 16, "positional": positional, "norm_first": norm_first,
             "tie_embeddings": tie, "pad_id": PAD}
        twin = Twin(c).to(dtype)
        src, tgt_in, tgt_out = batch(c)
        tensors = {"param." + k: v for k, v in twin.qkv_names().items()}
        tensors.update({"in.src": src, "in.tgt_in": tgt_in, "in.tgt_out": tgt_out,
                        "gout.loss": torch.ones((), dtype=dtype)})

        logits, loss = twin.loss(src, tgt_in, tgt_out)
        loss.backward()
        theirs = {"out.logits": logits.detach(), "out.loss": loss.detach()}
        theirs.update({"grad." + k: v for k, v in twin.qkv_names("grad").items()})

        opt = torch.optim.AdamW(twin.parameters(), lr=lr, weight_decay=wd)
        losses = []
        for step in range(STEPS):
            s, ti, to = batch(c)
            tensors.update({f"train.{step}.src": s, f"train.{step}.tgt_in": ti,
                            f"train.{step}.tgt_out": to})
            opt.zero_grad(set_to_none=True)
            _, l = twin.loss(s, ti, to)
            l.backward()
            torch.nn.utils.clip_grad_norm_(twin.parameters(), max_norm)
            opt.step()
            losses.append(l.item())
        theirs["out.train_loss"] = torch.tensor(losses, dtype=torch.float64)
        theirs.update({"final." + k: v for k, v in twin.qkv_names().items()})

        meta = {"config": json.dumps(c), "lr": repr(lr), "weight_decay": repr(wd),
                "max_norm": repr(max_norm), "steps": STEPS}
        ours = run_qkv("seq2seq", tensors, meta, dtype)
        if dtype == f32:
            # A key projection's bias has a gradient that is zero in exact arithmetic (see
            # k_bias_floors). In float32 its rounding noise (~1e-9) is not far below Adam's eps,
            # so each side takes its own steps of up to lr from its own noise, and the final
            # values are not comparable; float64 (noise ~1e-17) compares them. Both sides must
            # still have them.
            for k in [k for k in theirs if k.startswith("final.") and k.endswith("k_proj.bias")]:
                if k in ours:
                    del ours[k], theirs[k]
        return ours, theirs, k_bias_floors(theirs)
    return run


f.case("learned_post_norm", f64, seq2seq(f64))
f.case("learned_pre_norm_tied", f64, seq2seq(f64, norm_first=True, tie=True))
f.case("sinusoidal_post_norm", f64, seq2seq(f64, positional="sinusoidal"))
f.case("sinusoidal_post_norm", f32, seq2seq(f32, positional="sinusoidal"))

f.finish()
