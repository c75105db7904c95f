#!/usr/bin/env python3
"""Writes the benchmark corpora of docs/TRAINING.md ("Default run length") as pairs.tsv files.

Each corpus is made by its own small grammar, every pair unique, from a fixed seed:

  commands   20,000  "hop left twice then wave around right" -> "TL HOP TL HOP TR WAVE ..."
                     (SCAN-like: 6 verbs, 8 directions, 3 counts, one or two clauses joined by
                     "then" or "after"; outputs 1 to 48 tokens)
  numbers     3,000  "four hundred and twelve" -> "412" (English number words up to 9,999;
                     single-word targets)
  inflect     5,000  "velam PL DEF" -> "velamenit" (made-up stems, a suffix per tag, vowel
                     harmony; single-word targets)
  rewrite     8,000  "swap c a d b" -> "a c b d" (list edits: swap pairs, rotate, dedupe,
                     interleave; 2 to 10 symbols)

Usage: make_corpora.py OUT_DIR [NAME...]   (all four when no NAME is given)
"""
import os
import random
import sys

VERBS = {"hop": "HOP", "walk": "WALK", "wave": "WAVE", "duck": "DUCK", "spin": "SPIN", "jog": "JOG"}
TURN = {"left": "TL", "right": "TR"}
DIRECTIONS = ["", "left", "right", "back", "around left", "around right", "opposite left",
              "opposite right"]
COUNTS = {"": 1, "twice": 2, "thrice": 3}


def clause_actions(verb, direction, count):
    act = VERBS[verb]
    if direction == "":
        one = [act]
    elif direction in TURN:
        one = [TURN[direction], act]
    elif direction == "back":
        one = ["TL", "TL", act]
    elif direction.startswith("around"):
        one = [TURN[direction.split()[1]], act] * 4
    else:  # opposite: turn twice, then act
        t = TURN[direction.split()[1]]
        one = [t, t, act]
    return one * COUNTS[count]


def clause_text(verb, direction, count):
    return " ".join(w for w in (verb, direction, count) if w)


def commands(rng, n):
    clauses = [(v, d, c) for v in VERBS for d in DIRECTIONS for c in COUNTS]
    seen, out = set(), []
    while len(out) < n:
        a = rng.choice(clauses)
        if rng.random() < 0.1:
            src, tgt = clause_text(*a), clause_actions(*a)
        else:
            b = rng.choice(clauses)
            if rng.random() < 0.5:
                src = clause_text(*a) + " then " + clause_text(*b)
                tgt = clause_actions(*a) + clause_actions(*b)
            else:  # "x after y" does y first
                src = clause_text(*a) + " after " + clause_text(*b)
                tgt = clause_actions(*b) + clause_actions(*a)
        if src not in seen:
            seen.add(src)
            out.append((src, " ".join(tgt)))
    return out


ONES = "zero one two three four five six seven eight nine".split()
TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def words_below_100(n):
    if n < 10:
        return ONES[n]
    if n < 20:
        return TEENS[n - 10]
    return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])


def number_words(n):
    parts = []
    if n >= 1000:
        parts.append(ONES[n // 1000] + " thousand")
        n %= 1000
    if n >= 100:
        parts.append(ONES[n // 100] + " hundred")
        n %= 100
    if n > 0 or not parts:
        parts.append(("and " if parts else "") + words_below_100(n))
    return " ".join(parts)


def numbers(rng, n):
    return [(number_words(k), str(k)) for k in rng.sample(range(10000), n)]


CONSONANTS = "ptkbdgmnlrsv"
FRONT, BACK = "ei", "aou"
TAGS = {"PL": ("en", "an"), "DEF": ("it", "ut"), "GEN": ("es", "as"), "DIM": ("ik", "uk")}


def inflect_word(stem, tags):
    # vowel harmony: a stem whose last vowel is front takes the front suffixes
    last_vowel = [ch for ch in stem if ch in FRONT + BACK][-1]
    word = stem
    for tag in tags:
        front, back = TAGS[tag]
        suffix = front if last_vowel in FRONT else back
        if word[-1] in FRONT + BACK:  # vowel + vowel: the suffix's vowel drops
            suffix = suffix[1:]
        word += suffix
    return word


def inflect(rng, n):
    seen, out = set(), []
    order = ["DIM", "PL", "DEF", "GEN"]
    while len(out) < n:
        stem = "".join(rng.choice(CONSONANTS) + rng.choice(FRONT + BACK)
                       for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.5:
            stem += rng.choice(CONSONANTS)
        tags = [t for t in order if rng.random() < 0.4] or [rng.choice(order)]
        src = stem + " " + " ".join(tags)
        if src not in seen:
            seen.add(src)
            out.append((src, inflect_word(stem, tags)))
    return out


SYMBOLS = list("abcdefghij")


def rewrite(rng, n):
    ops = {
        "swap": lambda xs: [y for i in range(0, len(xs) - 1, 2) for y in (xs[i + 1], xs[i])]
        + (xs[-1:] if len(xs) % 2 else []),
        "rotate": lambda xs: xs[1:] + xs[:1],
        "dedupe": lambda xs: [x for i, x in enumerate(xs) if x not in xs[:i]],
        "interleave": lambda xs: [y for pair in zip(xs[: len(xs) // 2], xs[len(xs) // 2:])
                                  for y in pair] + (xs[-1:] if len(xs) % 2 else []),
    }
    seen, out = set(), []
    while len(out) < n:
        op = rng.choice(sorted(ops))
        xs = [rng.choice(SYMBOLS) for _ in range(rng.randint(2, 10))]
        src = op + " " + " ".join(xs)
        if src not in seen:
            seen.add(src)
            out.append((src, " ".join(ops[op](xs))))
    return out


CORPORA = {"commands": (commands, 20000), "numbers": (numbers, 3000), "inflect": (inflect, 5000),
           "rewrite": (rewrite, 8000)}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir, names = sys.argv[1], sys.argv[2:] or list(CORPORA)
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        make, size = CORPORA[name]
        pairs = make(random.Random(name), size)
        path = os.path.join(out_dir, name + ".tsv")
        with open(path, "w") as f:
            for src, tgt in pairs:
                f.write(src + "\t" + tgt + "\n")
        longest = max(len(t.split()) for _, t in pairs)
        print(f"{path}: {len(pairs)} pairs, longest target {longest} tokens")


if __name__ == "__main__":
    main()
