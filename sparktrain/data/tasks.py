"""Task families (a prompt template and a one-line rule for the answer) and the generated
scale datasets (docs/outputs.md "Task families"); draws are sha256 of (seed, counter)."""
from __future__ import annotations

import hashlib
import json
import os
import string
from pathlib import Path

from sparktrain.core.fsutil import atomic_write_text

TRAIN_FILE = "data/train/dataset_scale.jsonl"
EVAL_FILE = "data/eval/scale_heldout.jsonl"
DEFAULT_SEED = 0

# family -> prompt prefix, also how eval names a row's family; copy's marks a copy probe
PREFIXES = {"copy": "Say exactly: ", "reverse": "Reverse: ", "upper": "Uppercase: ",
            "next": "Next after: ", "lookup": "Look up "}
COPY_PREFIX = PREFIXES["copy"]

# Rows per family: copy weighted up, it is the family a tiny model learns first.
TRAIN_COUNTS = {"copy": 800, "reverse": 300, "upper": 300, "next": 300, "lookup": 300}
EVAL_COUNTS = {"copy": 80, "reverse": 30, "upper": 30, "next": 30, "lookup": 30}

HELDOUT_PERCENT = 10
LETTERS = string.ascii_lowercase


def family_of(prompt: str, family: str | None = None) -> str:
    """The row's own family key, else the family whose prefix starts the prompt, else chat."""
    return family or next((name for name, prefix in PREFIXES.items()
                           if prompt.startswith(prefix)), "chat")


def is_heldout(word: str) -> bool:
    """Fixed split of the word space, independent of the seed."""
    h = hashlib.sha256(b"spark-heldout\0" + word.encode("utf-8")).digest()
    return int.from_bytes(h[:4], "big") % 100 < HELDOUT_PERCENT


class _Draw:
    """Deterministic integers from sha256(seed, stream, counter)."""

    def __init__(self, seed: int, stream: str):
        self._prefix = f"{seed}\0{stream}\0".encode()
        self._n = 0

    def below(self, n: int) -> int:
        h = hashlib.sha256(self._prefix + str(self._n).encode()).digest()
        self._n += 1
        return int.from_bytes(h[:8], "big") % n  # bias ~ n / 2**64, negligible


def _word(draw: _Draw, heldout: bool, lo: int = 3, hi: int = 8) -> str:
    while True:
        n = lo + draw.below(hi - lo + 1)
        w = "".join(LETTERS[draw.below(26)] for _ in range(n))
        if is_heldout(w) == heldout:
            return w


def _of_a_word(family: str, answer):
    """A family whose prompt is its prefix and one word, the answer answer(word)."""
    def make(draw, heldout):
        w = _word(draw, heldout)
        return PREFIXES[family] + w, answer(w)
    return make


def _next(draw, heldout):
    # A letter a..y or a number 0..998: the answer is the one after it.
    while True:
        k = draw.below(25 + 999)
        item, answer = (LETTERS[k], LETTERS[k + 1]) if k < 25 else (str(k - 25), str(k - 24))
        if is_heldout(item) == heldout:
            return PREFIXES["next"] + item, answer


def _lookup(draw, heldout):
    # Three k=v pairs with distinct single-letter keys; ask for one of them.
    keys = []
    while len(keys) < 3:
        k = LETTERS[draw.below(26)]
        if k not in keys:
            keys.append(k)
    values = [_word(draw, heldout, 3, 5) for _ in keys]
    ask = draw.below(3)
    listing = " ".join(f"{k}={v}" for k, v in zip(keys, values))
    return f"{PREFIXES['lookup']}{keys[ask]} in: {listing}", values[ask]


FAMILIES = {"copy": _of_a_word("copy", str), "reverse": _of_a_word("reverse", lambda w: w[::-1]),
            "upper": _of_a_word("upper", str.upper), "next": _next, "lookup": _lookup}


def make_rows(seed: int, heldout: bool) -> list[dict]:
    """Rows with unique prompts, families interleaved in a seeded order."""
    counts = EVAL_COUNTS if heldout else TRAIN_COUNTS
    side = "eval" if heldout else "train"
    rows, seen = [], set()
    for family, count in counts.items():
        draw = _Draw(seed, f"{side}/{family}")
        end = len(rows) + count
        while len(rows) < end:
            prompt, completion = FAMILIES[family](draw, heldout)
            if prompt not in seen:
                seen.add(prompt)
                rows.append({"prompt": prompt, "completion": completion, "family": family})
    draw = _Draw(seed, f"{side}/order")
    for i in range(len(rows) - 1, 0, -1):  # Fisher-Yates
        j = draw.below(i + 1)
        rows[i], rows[j] = rows[j], rows[i]
    return rows


def write_scale_data(out_dir: str | os.PathLike = ".", seed: int = DEFAULT_SEED) -> list[Path]:
    """Write the training and held-out files under out_dir; returns their paths."""
    written = [Path(out_dir) / TRAIN_FILE, Path(out_dir) / EVAL_FILE]
    for path, heldout in zip(written, (False, True)):
        atomic_write_text(path, "".join(json.dumps(r, sort_keys=True, ensure_ascii=True) + "\n"
                                        for r in make_rows(seed, heldout)))
    return written
