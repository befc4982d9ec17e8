"""Tokenizers, bytes (the default) or byte-level BPE (Hugging Face `tokenizers`, from the 256
bytes: every text round-trips), one interface: `vocab`, BOS / SEP / EOS, `encode`, `to_json`."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from sparktrain.vocab import (BYTE_SPECIALS, BYTE_VOCAB, MAX_VOCAB, MIN_BPE_VOCAB, SPECIALS,
                              TOKENIZERS)
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import canonical_json, read_input, sha256_bytes
from sparktrain.core.jobfiles import TOKENIZER
from sparktrain.core.progress import Progress
from sparktrain.core.safeload import load_json
from sparktrain.core.values import is_count


class ByteTokenizer:
    """UTF-8 bytes are the tokens; 0xFD/0xFE/0xFF never occur in UTF-8 and are the specials."""
    kind = "byte"
    vocab = BYTE_VOCAB
    bos, sep, eos = BYTE_SPECIALS

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)  # (L,)

    def encode_many(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids if int(i) < self.bos).decode("utf-8", errors="replace")

    def byte_lengths(self) -> np.ndarray:
        """Bytes of text each id stands for: 1, and 0 for the specials."""
        return np.array([0 if i in (self.bos, self.sep, self.eos) else 1
                         for i in range(self.vocab)], dtype=np.int64)  # (V,)

    def completion_text(self, ids: Iterable[int]) -> str:
        """A generated completion's bytes as text (a special byte shows as U+FFFD)."""
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def is_exactly(self, ids: Iterable[int], text: str) -> bool:
        """Whether a generated completion is `text`, byte for byte."""
        return bytes(int(i) for i in ids) == text.encode("utf-8")

    def to_json(self) -> str:
        return canonical_json({"spark_tokenizer": "byte", "vocab": self.vocab,
                               "bos": self.bos, "sep": self.sep, "eos": self.eos})


BYTES = ByteTokenizer()   # every byte-token model's tokenizer (it holds no state)


class BpeTokenizer:
    """A trained byte-level BPE; the specials are ids 0..2 and never come out of text."""
    kind = "bpe"

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        # a source file that spells "<|eos|>" is text like any other
        self.tok.encode_special_tokens = True
        self.vocab = tok.get_vocab_size()
        self.bos, self.sep, self.eos = (tok.token_to_id(s) for s in SPECIALS)
        if None in (self.bos, self.sep, self.eos):
            raise SparkError(f"BPE tokenizer lacks the specials {', '.join(SPECIALS)}")

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tok.encode(text).ids, dtype=np.int64)  # (L,)

    def encode_many(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=np.int64) for e in self.tok.encode_batch(list(texts))]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def completion_text(self, ids: Iterable[int]) -> str:
        return self.decode(ids)

    def is_exactly(self, ids: Iterable[int], text: str) -> bool:
        return self.decode(ids) == text

    def byte_lengths(self) -> np.ndarray:
        """Bytes of text per id (0: specials); byte-level BPE spells a byte as one character."""
        specials = {self.bos, self.sep, self.eos}
        return np.array([0 if i in specials else len(self.tok.id_to_token(i))
                         for i in range(self.vocab)], dtype=np.int64)  # (V,)

    def to_json(self) -> str:
        # the library writes the vocab ordered by id: same training, same bytes
        return self.tok.to_str(pretty=True) + "\n"


def train_bpe(texts: Sequence[str], vocab_size: int) -> BpeTokenizer:
    """Byte-level BPE on `texts` (the train split only): deterministic for the same texts."""
    if not is_count(vocab_size) or not MIN_BPE_VOCAB <= vocab_size <= MAX_VOCAB:
        raise SparkError(f"vocab_size must be an integer in [{MIN_BPE_VOCAB}, {MAX_VOCAB}] for "
                         f"a BPE tokenizer (256 bytes + BOS/SEP/EOS), got {vocab_size!r}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=list(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = list(texts)
    with Progress("tokenizer", total=1, unit="BPE trained") as bar:
        tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
        bar.advance(note=f"vocab {tok.get_vocab_size()} from {len(texts):,} texts")
    return BpeTokenizer(tok)


def make_tokenizer(kind: str, vocab_size: int, texts: Callable[[], Sequence[str]]):
    """The tokenizer a job asks for; BPE is trained on `texts()` (only then read)."""
    if kind not in TOKENIZERS:
        raise SparkError(f"unknown tokenizer {kind!r}; known: {', '.join(TOKENIZERS)}")
    return ByteTokenizer() if kind == "byte" else train_bpe(texts(), vocab_size)


def parse_tokenizer(data: bytes, path: str = "<tokenizer>"):
    """A tokenizer.json of either kind; anything else is one line naming the file."""
    try:
        doc = load_json(data, path)
    except SparkError as err:  # nested too deep, too many values, duplicate keys, not JSON
        raise SparkError(f"{path} is not a tokenizer.json "
                         f"({str(err).removeprefix(path + ': ')})") from None
    if isinstance(doc, dict) and doc.get("spark_tokenizer") == "byte":
        if doc != load_json(ByteTokenizer().to_json(), "the byte tokenizer"):
            raise SparkError(f"{path}: byte tokenizer with unexpected fields")
        return ByteTokenizer()
    if not (isinstance(doc, dict) and isinstance(doc.get("model"), dict)
            and doc["model"].get("type") == "BPE"):
        raise SparkError(f"{path} is not a tokenizer.json of a byte or BPE tokenizer")
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as err:  # the library raises its own Exception type
        raise SparkError(f"{path}: the tokenizers library cannot load it "
                         f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") \
            from None
    return BpeTokenizer(tok)


def read_tokenizer(path, expect_sha256: str | None = None,
                   weights=None) -> tuple[ByteTokenizer | BpeTokenizer, str]:
    """(tokenizer, sha256 of the file): the one reader of a tokenizer.json. With
    `expect_sha256` (what `weights` record) other bytes are refused before parsing."""
    data = read_input(path, "tokenizer.json (run the tokenizer stage)")
    found = sha256_bytes(data)
    if expect_sha256 is not None and found != expect_sha256:
        raise SparkError(f"{path} is not the tokenizer {weights} was trained with (sha256 "
                         f"{found[:12]}..., the weights record {str(expect_sha256)[:12]}...); "
                         "give the job's tokenizer.json with --tokenizer")
    return parse_tokenizer(data, str(path)), found


def load_tokenizer(path) -> ByteTokenizer | BpeTokenizer:
    return read_tokenizer(path)[0]


def job_tokenizer(folder) -> tuple[ByteTokenizer | BpeTokenizer, str | None]:
    """A job folder's tokenizer.json, or bytes (sha256 None) when it has none (a fresh one)."""
    path = Path(folder) / TOKENIZER
    return read_tokenizer(path) if path.exists() else (ByteTokenizer(), None)


def tokenizer_for(weights, meta: dict, vocab: int, given=None):
    """The checked tokenizer `weights` were trained with: `given` or the tokenizer.json beside
    them, of the recorded `tokenizer_sha256`; none recorded: bytes (`given` must be too)."""
    recorded = meta.get("tokenizer_sha256")
    if recorded is None:
        if given is not None:
            tok = load_tokenizer(given)
            if tok.kind != "byte" or vocab != ByteTokenizer.vocab:
                raise SparkError(f"{given} is a {tok.kind} tokenizer of {tok.vocab} tokens but "
                                 f"{weights} records no tokenizer (a byte-token model)")
        return ByteTokenizer()
    path = Path(given) if given is not None else Path(weights).parent / TOKENIZER
    tok, _ = read_tokenizer(path, recorded, weights)
    if tok.vocab != vocab:
        raise SparkError(f"{path} has {tok.vocab} tokens but the weights' vocab is {vocab}")
    return tok
