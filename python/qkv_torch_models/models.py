"""qkv's four models (models/*.cpp) as torch.nn modules, built from a model.json "config" object.

Each computes what its qkv namesake computes, in eval mode (dropout off, BatchNorm on its running
statistics). Parameter names follow torch.nn's modules; names.py maps them to qkv's and back.
"""

import math

import torch
from torch import nn

from . import layers
from .positions import make_positional_encoding

# model.json "config" defaults, as models/seq2seq.h and models/classifiers.h declare them.
SEQ2SEQ_DEFAULTS = dict(src_vocab=0, tgt_vocab=0, d_model=64, num_heads=4, num_encoder_layers=2,
                        num_decoder_layers=2, dim_feedforward=256, dropout=0.1, max_len=256,
                        positional="sinusoidal", norm_first=False, tie_embeddings=False, pad_id=0,
                        checkpoint_activations=False)
TEXT_DEFAULTS = dict(vocab=0, num_classes=2, d_model=64, num_heads=4, num_layers=2,
                     dim_feedforward=128, dropout=0.1, max_len=256, positional="sinusoidal",
                     norm_first=False, pooling="cls")
CNN_DEFAULTS = dict(in_channels=1, image_size=28, num_classes=10, channels=[16, 32],
                    attention="none", reduction=4)
VIT_DEFAULTS = dict(in_channels=1, image_size=28, patch_size=7, num_classes=10, d_model=64,
                    num_heads=4, num_layers=2, dim_feedforward=128, dropout=0.0)


def _with_defaults(defaults, config):
    return {**defaults, **config}


class Seq2SeqTransformer(nn.Module):
    """src ids -> Embedding * sqrt(d) (+ positions) -> encoder -> memory; tgt ids -> Embedding *
    sqrt(d) (+ positions) -> causal decoder over memory -> generator (Linear) -> logits."""

    def __init__(self, config):
        super().__init__()
        c = self.config = _with_defaults(SEQ2SEQ_DEFAULTS, config)
        d = c["d_model"]
        self.src_embed = nn.Embedding(c["src_vocab"], d)
        self.tgt_embed = nn.Embedding(c["tgt_vocab"], d)
        self.src_pos = make_positional_encoding(c["positional"], d, c["max_len"])
        self.tgt_pos = make_positional_encoding(c["positional"], d, c["max_len"])
        stack = (d, c["num_heads"], c["dim_feedforward"], c["dropout"], "relu", c["norm_first"],
                 c["positional"])
        self.encoder = layers.encoder(*stack, c["num_encoder_layers"])
        self.decoder = layers.decoder(*stack, c["num_decoder_layers"])
        self.generator = nn.Linear(d, c["tgt_vocab"])
        if c["tie_embeddings"]:
            self.generator.weight = self.tgt_embed.weight

    def _embed(self, embedding, pos, ids, offset=0):
        x = embedding(ids) * math.sqrt(self.config["d_model"])
        return pos(x, offset) if pos is not None else x

    def encode(self, src_ids, src_pad_mask=None):
        return self.encoder(self._embed(self.src_embed, self.src_pos, src_ids),
                            src_key_padding_mask=src_pad_mask)

    def decode(self, tgt_in_ids, memory, src_pad_mask=None, tgt_pad_mask=None):
        x = self._embed(self.tgt_embed, self.tgt_pos, tgt_in_ids)
        T = tgt_in_ids.shape[1]
        h = self.decoder(x, memory, tgt_mask=layers.causal_mask(T, x.device),
                         tgt_key_padding_mask=tgt_pad_mask, memory_key_padding_mask=src_pad_mask)
        return self.generator(h)

    def forward(self, src_ids, tgt_in_ids, src_pad_mask=None, tgt_pad_mask=None):
        """Logits [B, T, tgt_vocab]; pad masks bool, True = pad."""
        return self.decode(tgt_in_ids, self.encode(src_ids, src_pad_mask), src_pad_mask,
                           tgt_pad_mask)

    @torch.no_grad()
    def greedy_decode(self, src_ids, src_pad_mask, bos, eos, max_len):
        """As qkv's greedy_decode: each row starts with bos and stops after eos or max_len tokens;
        finished rows are padded with pad_id. The prefix is decoded again each step (qkv's KV
        cache computes the same numbers). Returns [B, L] int64, bos included."""
        B = src_ids.shape[0]
        memory = self.encode(src_ids, src_pad_mask)
        out = torch.full((B, 1), bos, dtype=torch.int64, device=src_ids.device)
        done = torch.zeros(B, dtype=torch.bool, device=src_ids.device)
        for _ in range(max_len):
            last = self.decode(out, memory, src_pad_mask)[:, -1]
            best = last.argmax(dim=-1)
            out = torch.cat([out, torch.where(done, self.config["pad_id"], best).view(B, 1)], 1)
            done = done | (best == eos)
            if bool(done.all()):
                break
        return out


class TransformerClassifier(nn.Module):
    """ids -> Embedding * sqrt(d); "cls" prepends a learned [CLS] vector; positions; encoder
    (GELU); the [CLS] state or the mean over non-pad positions; head (Linear)."""

    def __init__(self, config):
        super().__init__()
        c = self.config = _with_defaults(TEXT_DEFAULTS, config)
        d = c["d_model"]
        self.embed = nn.Embedding(c["vocab"], d)
        self.pos = make_positional_encoding(c["positional"], d, c["max_len"] + 1)
        self.encoder = layers.encoder(d, c["num_heads"], c["dim_feedforward"], c["dropout"], "gelu",
                                      c["norm_first"], c["positional"], c["num_layers"])
        self.head = nn.Linear(d, c["num_classes"])
        if c["pooling"] == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        elif c["pooling"] != "mean":
            raise ValueError(f"TransformerClassifier: unknown pooling '{c['pooling']}' (cls, mean)")

    def forward(self, ids, pad_mask=None):
        B, T = ids.shape
        d = self.config["d_model"]
        x = self.embed(ids) * math.sqrt(d)
        mask = pad_mask if pad_mask is not None else torch.zeros(B, T, dtype=torch.bool)
        if self.config["pooling"] == "cls":
            x = torch.cat([self.cls_token.expand(B, 1, d), x], 1)
            mask = torch.cat([torch.zeros(B, 1, dtype=torch.bool), mask], 1)
        if self.pos is not None:
            x = self.pos(x)
        h = self.encoder(x, src_key_padding_mask=mask)
        if self.config["pooling"] == "cls":
            pooled = h[:, 0]
        else:
            keep = (~mask).to(h.dtype).unsqueeze(-1)
            pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1)
        return self.head(pooled)


class SEBlock(nn.Module):
    def __init__(self, channels, reduction):
        super().__init__()
        hidden = max(1, channels // reduction)
        self.fc1, self.fc2 = nn.Linear(channels, hidden), nn.Linear(hidden, channels)

    def forward(self, x):
        w = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean(dim=(2, 3))))))
        return x * w[:, :, None, None]


class ChannelAttention(nn.Module):
    def __init__(self, channels, reduction):
        super().__init__()
        hidden = max(1, channels // reduction)
        self.fc1 = nn.Linear(channels, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, channels, bias=False)

    def forward(self, x):
        def mlp(v):
            return self.fc2(torch.relu(self.fc1(v)))

        w = torch.sigmoid(mlp(x.mean(dim=(2, 3))) + mlp(x.amax(dim=(2, 3))))
        return x * w[:, :, None, None]


class SpatialAttention(nn.Module):
    def __init__(self, kernel_size=7):
        super().__init__()
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)

    def forward(self, x):
        maps = torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], 1)
        return x * torch.sigmoid(self.conv(maps))


class CBAM(nn.Module):
    def __init__(self, channels, reduction):
        super().__init__()
        self.channel = ChannelAttention(channels, reduction)
        self.spatial = SpatialAttention()

    def forward(self, x):
        return self.spatial(self.channel(x))


class ResidualBlock(nn.Module):
    """conv3x3 -> BN -> ReLU -> conv3x3 -> BN -> [SE | CBAM] -> + shortcut -> ReLU."""

    def __init__(self, in_channels, out_channels, stride, attention, reduction):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        if attention == "se":
            self.se = SEBlock(out_channels, reduction)
        elif attention == "cbam":
            self.cbam = CBAM(out_channels, reduction)
        elif attention != "none":
            raise ValueError(f"ResidualBlock: unknown attention '{attention}' (none, se, cbam)")
        self.attention = attention
        self.has_shortcut = stride != 1 or in_channels != out_channels
        if self.has_shortcut:
            self.shortcut_conv = nn.Conv2d(in_channels, out_channels, 1, stride, 0, bias=False)
            self.shortcut_bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        if self.attention == "se":
            y = self.se(y)
        if self.attention == "cbam":
            y = self.cbam(y)
        identity = self.shortcut_bn(self.shortcut_conv(x)) if self.has_shortcut else x
        return torch.relu(y + identity)


class CnnClassifier(nn.Module):
    """stem conv3x3 -> BN -> ReLU -> residual blocks (each after the first halves the size) ->
    global average pooling -> head (Linear)."""

    def __init__(self, config):
        super().__init__()
        c = self.config = _with_defaults(CNN_DEFAULTS, config)
        widths = list(c["channels"])
        self.stem = nn.Conv2d(c["in_channels"], widths[0], 3, 1, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(widths[0])
        blocks, width = [], widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            blocks.append(ResidualBlock(width, w, stride, c["attention"], c["reduction"]))
            width = w
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(width, c["num_classes"])

    def forward(self, images):
        x = torch.relu(self.stem_bn(self.stem(images)))
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))


class VisionTransformer(nn.Module):
    """Patches by a strided Conv2d, a [CLS] token, learned positions, a pre-norm encoder (GELU,
    final LayerNorm), a head (Linear) on the [CLS] state."""

    def __init__(self, config):
        super().__init__()
        c = self.config = _with_defaults(VIT_DEFAULTS, config)
        d, p = c["d_model"], c["patch_size"]
        n = (c["image_size"] // p) ** 2
        self.patch_embed = nn.Conv2d(c["in_channels"], d, p, p)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, d))
        self.encoder = layers.encoder(d, c["num_heads"], c["dim_feedforward"], c["dropout"], "gelu",
                                      True, None, c["num_layers"])
        self.head = nn.Linear(d, c["num_classes"])

    def forward(self, images):
        B, d = images.shape[0], self.config["d_model"]
        patches = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(B, 1, d), patches], 1) + self.pos_embed
        return self.head(self.encoder(x)[:, 0])


ARCHITECTURES = {
    "Seq2SeqTransformer": Seq2SeqTransformer,
    "TransformerClassifier": TransformerClassifier,
    "CnnClassifier": CnnClassifier,
    "VisionTransformer": VisionTransformer,
}


def build(architecture, config):
    """The module for a model.json's "architecture" and "config"."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"model.json: unknown \"architecture\" '{architecture}' "
                         f"({', '.join(ARCHITECTURES)})")
    return ARCHITECTURES[architecture](config)
