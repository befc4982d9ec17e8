"""Pairs data: JSONL rows -> (prompt, completion) pairs -> tokens, the one place a pair
becomes ids (docs/model.md "Dataset rows", "Tokens"); micro-batches and loss batches."""
from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Sequence

import numpy as np

from sparktrain.data.tokenizer import BYTES
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import open_input, size_cap
from sparktrain.core.safeload import load_json
from sparktrain.vocab import BYTE_SPECIALS, token_dtype

BOS, SEP, EOS = BYTE_SPECIALS


@dataclass(frozen=True)
class Pair:
    prompt: str
    completion: str
    line: int                  # 1-based line in the JSONL file (0 when built in code)
    family: str | None = None  # optional task family, for eval breakdowns


@dataclass(frozen=True)
class Encoded:
    tokens: np.ndarray   # (L,) uint8 (uint16 when the vocab exceeds 256), L <= seq_len + 1
    mask: np.ndarray     # (L-1,) float32, 1.0 where target tokens[i+1] is counted
    truncated: bool      # the full sequence was longer than seq_len + 1
    context: np.ndarray  # (<= seq_len,) like tokens, pool mode: last seq_len of [BOS]+prompt+[SEP]
    first_target: int    # pool mode target: first completion token, or EOS if empty


class PackedRows(Sequence[Encoded]):
    """Encoded rows in flat arrays (a row: its tokens plus ~40 bytes, not ~900 as numpy
    objects), rebuilt on access; the mask is kept as its first counted target's index."""

    def __init__(self, rows: Iterator[Encoded], dtype=np.uint8):
        tokens, contexts, counted, truncated, first = bytearray(), bytearray(), [], [], []
        tok_off, ctx_off = [0], [0]
        for e in rows:
            tokens += e.tokens.astype(dtype, copy=False).tobytes()
            contexts += e.context.astype(dtype, copy=False).tobytes()
            tok_off.append(tok_off[-1] + len(e.tokens))
            ctx_off.append(ctx_off[-1] + len(e.context))
            counted.append(int(np.argmax(e.mask > 0)) if e.mask.any() else len(e.mask))
            truncated.append(e.truncated)
            first.append(e.first_target)
        self.tokens = np.frombuffer(bytes(tokens), dtype=dtype)
        self.contexts = np.frombuffer(bytes(contexts), dtype=dtype)
        self.tok_off = np.array(tok_off, dtype=np.int64)
        self.ctx_off = np.array(ctx_off, dtype=np.int64)
        self.counted = np.array(counted, dtype=np.int64)
        self.truncated = np.array(truncated, dtype=bool)
        self.first = np.array(first, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.counted)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]  # a negative index counts from the end; IndexError past it
        tokens = self.tokens[self.tok_off[i]:self.tok_off[i + 1]]             # (L,)
        mask = (np.arange(len(tokens) - 1) >= self.counted[i]).astype(np.float32)
        return Encoded(tokens, mask, bool(self.truncated[i]),
                       self.contexts[self.ctx_off[i]:self.ctx_off[i + 1]], int(self.first[i]))

    @property
    def n_tokens(self) -> int:
        return int(self.tok_off[-1]) - len(self)

    @property
    def n_counted(self) -> int:
        lengths = np.diff(self.tok_off) - 1                                     # (n,)
        return int(np.maximum(lengths - self.counted, 0).sum())


@dataclass(frozen=True)
class Dataset:
    path: str
    sha256: str                  # of the file bytes
    encoded: PackedRows          # the rows' tokens, in file order
    n: int                       # rows
    n_tokens: int                # input positions, summed over rows (after truncation)
    n_counted: int               # counted targets (attention mode)
    n_truncated: int


def load_pairs(path: str | os.PathLike) -> list[Pair]:
    """Every usable row of a JSONL file, in file order; SparkError on the first bad one."""
    return read_pairs(path)[0]


def read_pairs(path: str | os.PathLike) -> tuple[list[Pair], str]:
    """(pairs, sha256 of the file), streamed row by row: the file is never held whole."""
    digest = hashlib.sha256()
    with open_input(path, "dataset") as f:
        pairs = list(_iter_pairs(f, path, digest))
    return pairs, digest.hexdigest()


def parse_pairs(data: bytes, path: str | os.PathLike = "<data>") -> list[Pair]:
    return list(_iter_pairs(io.BytesIO(data), path, hashlib.sha256()))


def _rows(f: BinaryIO, path, digest) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line, one above the row cap refused unread."""
    cap = size_cap("dataset row")
    lineno = 0
    while True:
        try:
            raw = f.readline(cap + 1)
        except OSError as err:
            raise SparkError(f"cannot read {path}: {err.strerror or err}") from None
        if not raw:
            return
        lineno += 1
        digest.update(raw)
        body = raw[:-1] if raw.endswith(b"\n") else raw
        if len(body) > cap:
            raise SparkError(f"{path}:{lineno}: row is longer than the {cap:,}-byte limit "
                             "(raise it with SPARK_MAX_ROW_MB)")
        yield lineno, body


def json_objects(f: BinaryIO, path, digest) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank JSONL line; anything else: one line naming it."""
    for lineno, raw in _rows(f, path, digest):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SparkError(f"{path}:{lineno}: not UTF-8 (bad byte at column "
                             f"{err.start + 1})") from None
        if not text.strip():
            continue  # blank lines are allowed anywhere
        where = f"{path}:{lineno}"
        row = load_json(text, where)  # bounded: depth, values, digits, duplicate keys
        if not isinstance(row, dict):
            raise SparkError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
        yield lineno, row


def _iter_pairs(f: BinaryIO, path, digest) -> Iterator[Pair]:
    """The pairs of the file one by one; an empty dataset is an error at the end."""
    seen = False
    for lineno, row in json_objects(f, path, digest):
        seen = True
        yield _pair_of(row, f"{path}:{lineno}", lineno)
    if not seen:
        raise SparkError(f"dataset {path} has no rows (empty file or only blank lines)")


def _pair_of(row: dict, where: str, lineno: int) -> Pair:
    if "messages" in row:
        prompt, completion = _chat_row(row["messages"], where)
    elif "prompt" in row or "completion" in row:
        prompt = _text_field(row, "prompt", where)
        completion = _text_field(row, "completion", where)
    else:
        raise SparkError(f"{where}: row has neither 'messages' nor 'prompt'/'completion'")
    family = row.get("family")
    if family is not None and not isinstance(family, str):
        raise SparkError(f"{where}: 'family' must be a string, got {type(family).__name__}")
    for key, text in (("prompt", prompt), ("completion", completion), ("family", family or "")):
        try:  # JSON may spell a lone surrogate (\ud800): no UTF-8 bytes to train on
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise SparkError(f"{where}: the {key} holds a lone surrogate at character "
                             f"{err.start}, which is not text") from None
    return Pair(prompt, completion, lineno, family)


def _text_field(row: dict, key: str, where: str) -> str:
    if key not in row:
        raise SparkError(f"{where}: missing '{key}'")
    value = row[key]
    if not isinstance(value, str):
        raise SparkError(f"{where}: '{key}' must be a string, got {type(value).__name__}")
    if not value:
        raise SparkError(f"{where}: '{key}' is empty")
    return value


def _chat_row(messages, where: str) -> tuple[str, str]:
    """prompt = the last user content, completion = the last assistant content."""
    if not isinstance(messages, list):
        raise SparkError(f"{where}: 'messages' must be a list, got {type(messages).__name__}")
    last: dict[str, str] = {}
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise SparkError(f"{where}: messages[{i}] must be an object")
        role, content = msg.get("role"), msg.get("content")
        if not isinstance(role, str):
            raise SparkError(f"{where}: messages[{i}] has no string 'role'")
        if not isinstance(content, str):
            raise SparkError(f"{where}: messages[{i}] 'content' must be a string")
        last[role] = content
    for role, name in (("user", "prompt"), ("assistant", "completion")):
        if role not in last:
            raise SparkError(f"{where}: no '{role}' message (the {name})")
        if not last[role]:
            raise SparkError(f"{where}: the last '{role}' message (the {name}) is empty")
    return last["user"], last["assistant"]


def prompt_tokens(prompt: str, tok=BYTES) -> np.ndarray:
    """[BOS] + prompt + [SEP], what the model sees before the completion, in `tok`'s ids."""
    tokens = np.concatenate([[tok.bos], tok.encode(prompt), [tok.sep]])
    return tokens.astype(token_dtype(tok.vocab))


def encode_pair(pair: Pair, seq_len: int, tok=BYTES) -> Encoded:
    """[BOS] + prompt + [SEP] + completion + [EOS] in `tok`'s ids, cut to its last
    seq_len + 1 tokens; targets after the SEP are counted."""
    if seq_len < 1:
        raise SparkError(f"seq_len must be at least 1, got {seq_len}")
    head = prompt_tokens(pair.prompt, tok)                                 # (P,)
    body, eos = tok.encode(pair.completion), tok.eos
    tokens = np.concatenate([head, body, [eos]]).astype(head.dtype)       # (L,)
    sep_at = len(head) - 1
    # mask[i] is for target tokens[i+1]: counted when that index is after the SEP.
    mask = (np.arange(1, len(tokens)) > sep_at).astype(np.float32)        # (L-1,)
    truncated = len(tokens) > seq_len + 1
    if truncated:
        start = len(tokens) - (seq_len + 1)
        tokens, mask = tokens[start:], mask[start:]  # mask keeps the original decision
    first = int(body[0]) if len(body) else eos
    # copies, so a long row's full array is not kept alive by a short view
    return Encoded(tokens.copy(), mask.copy(), truncated, head[-seq_len:].copy(), first)


def load_dataset(path: str | os.PathLike, seq_len: int, tok=BYTES) -> Dataset:
    """The file's rows tokenised by `tok`, streamed: memory is a small factor of the file."""
    if seq_len < 1:
        raise SparkError(f"seq_len must be at least 1, got {seq_len}")
    digest = hashlib.sha256()
    with open_input(path, "dataset") as f:
        encoded = PackedRows((encode_pair(p, seq_len, tok) for p in _iter_pairs(f, path, digest)),
                             token_dtype(tok.vocab))
    return Dataset(str(path), digest.hexdigest(), encoded, len(encoded), encoded.n_tokens,
                   encoded.n_counted, int(encoded.truncated.sum()))


def iter_batches(rows: Sequence[Encoded], batch_size: int, make_batch) -> Iterator:
    """Consecutive batches in file order (the last may be smaller), laid out by make_batch."""
    if batch_size < 1:
        raise SparkError(f"batch_size must be at least 1, got {batch_size}")
    for start in range(0, len(rows), batch_size):
        yield make_batch(rows[start:start + batch_size])


LOSS_BATCH = 64   # pairs per forward when measuring a whole-set loss
KEEP_ROWS = 4096  # up to this many rows, the loss batches are padded once and kept


class MinibatchSampler:
    """Seeded permutation, reshuffled each epoch; batch_size >= n: all, in file order."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size = n, batch_size
        self.rng = np.random.default_rng([seed, 0x5EED])
        self.order: np.ndarray = np.arange(0)
        self.pos = 0

    def next(self) -> np.ndarray:
        if self.batch_size >= self.n:
            return np.arange(self.n)
        if self.pos + self.batch_size > self.order.size:
            self.order = self.rng.permutation(self.n)
            self.pos = 0
        idx = self.order[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return idx

    def state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "order": self.order.tolist(),
                "pos": self.pos}

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.order = np.array(state["order"], dtype=np.int64)
        self.pos = state["pos"]


class RowBatches(MinibatchSampler):
    """The loop's micro-batches: the whole set laid out once when one batch holds it."""

    def __init__(self, rows: PackedRows, batch_size: int, seed: int, make_batch):
        super().__init__(len(rows), batch_size, seed)
        self.rows, self.make_batch = rows, make_batch
        self.whole = make_batch(rows) if batch_size >= len(rows) else None

    def next(self):
        return self.whole if self.whole is not None \
            else self.make_batch([self.rows[j] for j in super().next()])


class _Relaid:
    """A large set's loss batches, laid out again at each measurement: kept padded, 200k
    short rows cost 30x their file; this costs one more pass over the rows instead."""

    def __init__(self, rows, make_batch):
        self.rows, self.make_batch = rows, make_batch

    def __iter__(self):
        return iter_batches(self.rows, LOSS_BATCH, self.make_batch)


def loss_batches(rows: PackedRows, make_batch):
    """A whole set in file order: small sets padded once and kept, large ones relaid."""
    return _Relaid(rows, make_batch) if len(rows) > KEEP_ROWS \
        else list(iter_batches(rows, LOSS_BATCH, make_batch))
