"""A run folder's vocabulary files (train/tokenizer.h): {"tokenizer": "char"|"whitespace",
"tokens": [...]}, ids 0..3 the special tokens <pad>, <s>, </s>, <unk>."""

import re

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
_C_SPACE = re.compile(r"[ \t\n\v\f\r]+")  # std::isspace in the C locale


class Vocab:
    def __init__(self, tokenizer, tokens, source="vocab"):
        if tokenizer not in ("char", "whitespace"):
            raise ValueError(f"{source}: \"tokenizer\" must be char or whitespace, "
                             f"got '{tokenizer}'")
        if tuple(tokens[:4]) != SPECIALS:
            raise ValueError(f"{source}: \"tokens\" must start with {', '.join(SPECIALS)}")
        self.tokenizer, self.tokens = tokenizer, list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    @staticmethod
    def from_json(j, source="vocab"):
        return Vocab(j.get("tokenizer"), j.get("tokens", []), source)

    def to_json(self):
        return {"tokenizer": self.tokenizer, "tokens": self.tokens}

    def __len__(self):
        return len(self.tokens)

    def tokenize(self, text):
        if self.tokenizer == "char":
            return list(text)  # code points, as qkv's split_utf8 on valid UTF-8
        return [t for t in _C_SPACE.split(text) if t]

    def encode(self, text):
        """Ids without BOS/EOS; unknown tokens are UNK."""
        return [self.ids.get(t, UNK) for t in self.tokenize(text)]

    def decode(self, ids):
        """Stops at the first EOS, skips PAD and BOS; whitespace tokens joined by one space."""
        parts = []
        for i in ids:
            if i == EOS:
                break
            if i in (PAD, BOS):
                continue
            parts.append(self.tokens[i])
        return (" " if self.tokenizer == "whitespace" else "").join(parts)
