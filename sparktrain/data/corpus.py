"""A corpus: the regular text files under a root matching globs, split train / held-out by a
hash of each relative path, a bad file one line naming it (docs/training.md "Corpora"); its
token streams (nanoGPT's train.bin / val.bin: [BOS] + tokens + [EOS] per file, flat uint8 or
uint16, little-endian, memory-mapped) and their windows; a job's prepared `corpus/`: files.json
(what was read, token counts, the tokenizer's sha256, the compressor baselines of
data/baselines.py) and the streams."""
from __future__ import annotations

import hashlib
import os
import stat
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from sparktrain.data.base import STDLIB
from sparktrain.data.baselines import cached_baselines
from sparktrain.vocab import token_dtype
from sparktrain.core.errors import SparkError, printable
from sparktrain.core.fsutil import (atomic_write_bytes, sha256_bytes, size_cap, utf8_name,
                                    write_json)
from sparktrain.core.jobfiles import CORPUS_FILES, TRAIN_BIN, VAL_BIN
from sparktrain.core.progress import Progress
from sparktrain.core.safeload import load_json_file
from sparktrain.model.base import TokenBatch

MAX_FILE_BYTES = 64 << 20  # one source file above this is a mistake, not code
MAX_FILES = 100_000        # paths one glob may match


@dataclass(frozen=True)
class CorpusFile:
    path: str        # relative to the corpus root, POSIX
    size: int        # bytes
    sha256: str
    heldout: bool
    text: str

    def record(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256,
                "split": "heldout" if self.heldout else "train"}


@dataclass(frozen=True)
class Corpus:
    root: str                      # as the user named it (STDLIB stays STDLIB)
    patterns: tuple[str, ...]
    heldout_fraction: float
    files: tuple[CorpusFile, ...]  # sorted by path
    extra: dict | None = None      # what corpus.extra added to the train split (data/extra.py)

    @property
    def train(self) -> tuple[CorpusFile, ...]:
        return tuple(f for f in self.files if not f.heldout)

    @property
    def heldout(self) -> tuple[CorpusFile, ...]:
        return tuple(f for f in self.files if f.heldout)

    def manifest(self) -> dict:
        """What was read, for DVC and the checkpoint: sizes and sha256 per file."""
        train, held = self.train, self.heldout
        return {"root": self.root, "patterns": list(self.patterns),
                "heldout_fraction": self.heldout_fraction,
                "files": [f.record() for f in self.files],
                "train_files": len(train), "heldout_files": len(held),
                "train_bytes": sum(f.size for f in train),
                "heldout_bytes": sum(f.size for f in held),
                "sha256": manifest_sha256(self.files),
                **({} if self.extra is None else {"extra": self.extra})}


def manifest_sha256(files) -> str:
    """One hash of the whole corpus: each file's path, split and content hash."""
    lines = "".join(f"{f.path}\t{'heldout' if f.heldout else 'train'}\t{f.sha256}\n"
                    for f in files)
    return sha256_bytes(lines.encode("utf-8"))


def resolve_root(root: str) -> Path:
    """`@stdlib` is the running interpreter's standard library; anything else a folder."""
    path = Path(sysconfig.get_paths()["stdlib"]) if root == STDLIB else Path(root)
    if not path.is_dir():
        what = "the interpreter's standard library" if root == STDLIB else "the corpus root"
        raise SparkError(f"corpus root {root} is not a folder ({what} must be one)")
    return path


def is_heldout(rel_path: str, fraction: float) -> bool:
    """Held out when the path's hash, as a number in [0, 1), is below `fraction`."""
    digest = hashlib.sha256(rel_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < fraction


def match_files(root: Path, patterns) -> list[str]:
    """Relative POSIX paths under `root` matched by any pattern, sorted, no folders."""
    if not patterns:
        raise SparkError("corpus: no glob pattern given (e.g. '**/*.py')")
    found: set[str] = set()
    for pattern in patterns:
        if not isinstance(pattern, str) or not Path(pattern).parts \
                or Path(pattern).is_absolute() or ".." in Path(pattern).parts:  # "" or "."
            raise SparkError(f"corpus glob {pattern!r} must be a relative pattern inside "
                             f"the root (e.g. '**/*.py')")
        matched = []
        try:
            for path in root.glob(pattern):  # the first MAX_FILES: a glob is not a crawl
                matched.append(path)
                if len(matched) > MAX_FILES:
                    raise SparkError(f"corpus glob {printable(pattern)[:80]!r} matches over "
                                     f"{MAX_FILES:,} paths; narrow it")
        except (ValueError, OSError, RecursionError, IndexError) as err:  # malformed, a loop
            raise SparkError(f"corpus glob {printable(pattern)[:80]!r}: {_reason(err)}") from None
        for path in matched:
            try:
                mode = os.stat(path).st_mode  # follows links: a link to a FIFO is a FIFO
            except OSError as err:
                raise SparkError(f"corpus file {path.relative_to(root).as_posix()}: "
                                 f"cannot stat ({err.strerror or err})") from None
            if stat.S_ISDIR(mode):
                continue
            rel = utf8_name(path.relative_to(root).as_posix(), "corpus file")
            if not stat.S_ISREG(mode):
                raise SparkError(f"corpus file {rel} is not a regular file (a FIFO, socket "
                                 f"or device); narrow the glob")
            found.add(rel)
    return sorted(found)


def _reason(err: Exception) -> str:
    if isinstance(err, OSError):
        return err.strerror or str(err)
    return str(err).splitlines()[0][:120] if str(err) else type(err).__name__


def check_total(root: Path, rels: list[str]) -> None:
    """The corpus's total size against its cap, from stat, before a byte is read."""
    cap = size_cap("corpus")
    total = sum(os.stat(root / rel).st_size for rel in rels)
    if cap is not None and total > cap:
        raise SparkError(f"corpus is {total:,} bytes in {len(rels):,} files, above the "
                         f"{cap:,}-byte limit (SPARK_MAX_CORPUS_MB raises it)")


def read_text_file(root: Path, rel: str) -> tuple[bytes, str]:
    try:
        with open(root / rel, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise SparkError(f"corpus file {rel}: cannot read ({err.strerror or err})") from None
    if len(data) > MAX_FILE_BYTES:
        raise SparkError(f"corpus file {rel} is over {MAX_FILE_BYTES >> 20} MiB; "
                         f"narrow the glob")
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SparkError(f"corpus file {rel} is not UTF-8 (bad byte at offset "
                         f"{err.start}); narrow the glob or convert it") from None


def read_corpus(root: str, patterns, heldout_fraction: float) -> Corpus:
    """Every matched file, read and split; SparkError (one line) on the first bad one."""
    if not 0 < heldout_fraction < 1:
        raise SparkError(f"corpus heldout fraction must be in (0, 1), got {heldout_fraction}")
    base = resolve_root(root)
    patterns = tuple(patterns) if not isinstance(patterns, str) else (patterns,)
    rels = match_files(base, patterns)
    if not rels:
        raise SparkError(f"corpus glob {', '.join(patterns)} matches no file under {root}; "
                         f"name the files with corpus.glob (`spark train --glob '*.txt'`)")
    check_total(base, rels)
    files = []
    for rel in rels:
        data, text = read_text_file(base, rel)
        files.append(CorpusFile(rel, len(data), sha256_bytes(data),
                                is_heldout(rel, heldout_fraction), text))
    return check_splits(Corpus(root, patterns, heldout_fraction, tuple(files)),
                        f"corpus {root} ({', '.join(patterns)})", "files",
                        f"add files or change the held-out fraction {heldout_fraction:g} "
                        f"(`spark train --heldout 0.2`, corpus.heldout in params.yaml)")


def check_splits(corpus: Corpus, what: str, unit: str, fix: str) -> Corpus:
    """`corpus`, when both splits hold some text; else one line saying which is empty."""
    for split, chosen in (("train", corpus.train), ("held-out", corpus.heldout)):
        if not any(f.size for f in chosen):
            raise SparkError(f"{what}: the {split} split is empty ({len(corpus.files)} "
                             f"{unit}); {fix}")
    return corpus


def stream_of(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """The split's stream: each text framed by BOS and EOS, in the given order."""
    bos, eos = np.array([tokenizer.bos], dtype=np.int64), np.array([tokenizer.eos], dtype=np.int64)
    parts = [part for ids in tokenizer.encode_many(texts) for part in (bos, ids, eos)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)  # (N,)


def write_stream(path: str | os.PathLike, tokens: np.ndarray, vocab: int) -> None:
    dtype = token_dtype(vocab).newbyteorder("<")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(f"token id outside [0, {vocab})")
    atomic_write_bytes(path, tokens.astype(dtype).tobytes())


def read_stream(path: str | os.PathLike, vocab: int) -> np.ndarray:
    """The stream memory-mapped (read-only): a multi-GB corpus costs no RAM."""
    dtype = token_dtype(vocab).newbyteorder("<")
    try:
        size = os.stat(path).st_size
    except OSError as err:
        raise SparkError(f"cannot read token stream {os.fspath(path)}: "
                         f"{err.strerror or err}; run the prepare stage") from None
    if size % dtype.itemsize:
        raise SparkError(f"token stream {os.fspath(path)} has {size} bytes, not a whole "
                         f"number of {dtype.name} tokens; run the prepare stage again")
    return np.memmap(path, dtype=dtype, mode="r") if size else np.zeros(0, dtype=dtype)


def window_index(starts, seq_len: int) -> np.ndarray:
    """Positions s .. s + seq_len of each start s: one gather reads every window."""
    return np.asarray(starts, dtype=np.int64)[:, None] + np.arange(seq_len + 1)  # (B, T+1)


def windows_batch(stream: np.ndarray, starts, seq_len: int) -> TokenBatch:
    """The windows stream[s : s + seq_len + 1]: inputs, next-token targets, all counted."""
    rows = np.asarray(stream)[window_index(starts, seq_len)].astype(np.int64)  # (B, T+1)
    return TokenBatch(rows[:, :-1], rows[:, 1:], np.ones((len(rows), seq_len), np.float32))


class WindowSampler:
    """Seeded windows of seq_len + 1 tokens anywhere in the stream, every target counted."""

    def __init__(self, stream: np.ndarray, seq_len: int, batch_size: int, seed: int):
        if len(stream) < seq_len + 1:
            raise SparkError(f"the train stream has {len(stream)} tokens, fewer than seq_len + 1 "
                             f"= {seq_len + 1}; use a larger corpus or a smaller seq_len")
        self.stream, self.seq_len, self.batch_size = stream, seq_len, batch_size
        self.rng = np.random.default_rng([seed, 0x57E4])

    def next(self) -> TokenBatch:
        starts = self.rng.integers(0, len(self.stream) - self.seq_len, size=self.batch_size)
        return windows_batch(self.stream, starts, self.seq_len)

    def state(self) -> dict:
        """The generator's state, so a resumed run draws the same windows."""
        return self.rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state


class EpochWindows:
    """step.sampling epoch: each epoch cuts the stream into windows of seq_len + 1 tokens every
    seq_len from a random offset, read in a random order (every target once an epoch; a batch
    may end one epoch and start the next). State: the generator at the epoch's start, pos."""

    def __init__(self, stream: np.ndarray, seq_len: int, batch_size: int, seed: int):
        WindowSampler(stream, seq_len, batch_size, seed)  # the same refusal of a short stream
        self.stream, self.seq_len, self.batch_size = stream, seq_len, batch_size
        self.rng = np.random.default_rng([seed, 0xE90C])
        self._new_epoch()

    def _new_epoch(self) -> None:
        self.epoch_start = self.rng.bit_generator.state
        offset = int(self.rng.integers(0, self.seq_len))
        count = max((len(self.stream) - 1 - offset) // self.seq_len, 1)
        self.order = offset + self.seq_len * self.rng.permutation(count)
        self.pos = 0

    def next(self) -> TokenBatch:
        starts = []
        while len(starts) < self.batch_size:
            if self.pos == len(self.order):
                self._new_epoch()
            take = self.order[self.pos:self.pos + self.batch_size - len(starts)]
            starts.extend(take.tolist())
            self.pos += len(take)
        return windows_batch(self.stream, starts, self.seq_len)

    def state(self) -> dict:
        return {"epoch_start": self.epoch_start, "pos": self.pos}

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["epoch_start"]
        self._new_epoch()
        if not 0 <= state["pos"] <= len(self.order):
            raise ValueError("its position is not in the epoch")
        self.pos = state["pos"]


SAMPLERS = {"random": WindowSampler, "epoch": EpochWindows}  # by step.sampling


def stream_batches(stream: np.ndarray, seq_len: int, batch_size: int,
                   pad: int) -> Iterator[TokenBatch]:
    """Non-overlapping windows in order, the last right-padded: sliding_batches at seq_len."""
    if len(stream) < 2:  # no target: no window
        return iter(())
    return sliding_batches(stream, seq_len, seq_len, batch_size, pad)


def sliding_batches(stream: np.ndarray, seq_len: int, stride: int, batch_size: int,
                    pad: int) -> Iterator[TokenBatch]:
    """Windows every `stride` tokens, each target counted once: the first window counts
    all, every later one its last `stride` (seeing >= seq_len - stride tokens of context)."""
    flat, n = np.asarray(stream), len(stream)
    starts = np.arange(0, max(n - 1 - seq_len, 0) + stride, stride)
    starts = starts[(starts == 0) | (starts + seq_len - stride + 1 < n)]
    fresh = np.arange(seq_len)[None, :] >= seq_len - stride                     # (1, T)
    for b0 in range(0, len(starts), batch_size):
        s = starts[b0:b0 + batch_size]
        idx = window_index(s, seq_len)                                         # (B, T+1)
        real = idx[:, 1:] < n                                                  # (B, T)
        counted = real & (fresh | (s[:, None] == 0))                           # (B, T)
        rows = flat[np.minimum(idx, n - 1)].astype(np.int64)                   # (B, T+1)
        # the context before a window's counted targets is kept: only padding replaced
        yield TokenBatch(np.where(real, rows[:, :-1], pad),
                         np.where(counted, rows[:, 1:], pad), counted.astype(np.float32))


@dataclass(frozen=True)
class Prepared:
    manifest: dict
    train: np.ndarray   # (N_train,) memory-mapped token ids
    val: np.ndarray     # (N_val,)

    @property
    def heldout_bytes(self) -> int:
        return self.manifest["heldout_bytes"]


def heldout_bytes(corpus: Corpus) -> bytes:
    """The held-out text in path order: what the model's and compressors' bpb measure."""
    return b"".join(f.text.encode("utf-8") for f in corpus.heldout)


def train_bytes(corpus: Corpus) -> bytes:
    """The train text in path order: what primes the compressors before the held-out text."""
    return b"".join(f.text.encode("utf-8") for f in corpus.train)


def write_prepared(folder: str | Path, corpus: Corpus, tokenizer, tokenizer_sha256: str) -> Path:
    folder = Path(folder)
    with Progress("prepare", total=4, unit="steps") as bar:
        train = stream_of(tokenizer, [f.text for f in corpus.train])  # (N_train,)
        bar.advance(note=f"train split: {len(corpus.train)} files, {train.size:,} tokens")
        val = stream_of(tokenizer, [f.text for f in corpus.heldout])  # (N_val,)
        bar.advance(note=f"held-out split: {len(corpus.heldout)} files, {val.size:,} tokens")
        write_stream(folder / TRAIN_BIN, train, tokenizer.vocab)
        write_stream(folder / VAL_BIN, val, tokenizer.vocab)
        bar.advance(note=f"wrote {TRAIN_BIN}, {VAL_BIN}")
        baselines = cached_baselines(heldout_bytes(corpus), train_bytes(corpus),
                                     manifest_sha256(corpus.files), folder)
        bar.advance(note=f"zlib-9 {baselines['zlib9_bpb']:.3f}, lzma-9e "
                         f"{baselines['lzma9e_bpb']:.3f}, PPMd primed "
                         f"{baselines['ppmd_primed_bpb']:.3f} bpb on the held-out bytes")
    manifest = {**corpus.manifest(), "kind": "corpus", "tokenizer": tokenizer.kind,
                "tokenizer_sha256": tokenizer_sha256, "vocab": tokenizer.vocab,
                "dtype": token_dtype(tokenizer.vocab).newbyteorder("<").str,
                "train_tokens": int(train.size), "heldout_tokens": int(val.size),
                "heldout_baselines": baselines}
    write_json(folder / CORPUS_FILES, manifest)
    return folder / CORPUS_FILES


def write_pairs_note(folder: str | Path, dataset: str, dataset_bytes: bytes) -> Path:
    """A pairs job has no streams: files.json only says which file the rows come from."""
    path = Path(folder) / CORPUS_FILES
    write_json(path, {"kind": "pairs", "dataset": dataset,
                      "dataset_sha256": sha256_bytes(dataset_bytes)})
    return path


def read_prepared(folder: str | Path, tokenizer_sha256: str | None = None) -> Prepared:
    """The prepared corpus, checked against the tokenizer that will read it."""
    folder = Path(folder)
    files = folder / CORPUS_FILES
    try:
        manifest = load_json_file(files, "prepared corpus list")
    except SparkError:
        raise SparkError(f"{files} is not JSON; run the prepare stage again") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != "corpus":
        raise SparkError(f"{files} is not a prepared corpus (the job's dataset is "
                         f"not a corpus folder)")
    if tokenizer_sha256 is not None and manifest.get("tokenizer_sha256") != tokenizer_sha256:
        raise SparkError(f"{files} was tokenized with another tokenizer.json "
                         f"(sha256 {str(manifest.get('tokenizer_sha256'))[:12]}...); run the "
                         f"prepare stage again")
    vocab = manifest["vocab"]
    train, val = read_stream(folder / TRAIN_BIN, vocab), read_stream(folder / VAL_BIN, vocab)
    for name, stream, key in (("train", train, "train_tokens"),
                              ("held-out", val, "heldout_tokens")):
        if len(stream) != manifest[key]:
            raise SparkError(f"the {name} stream of {folder} has {len(stream)} tokens, "
                             f"{CORPUS_FILES} says {manifest[key]}; run the prepare stage again")
    return Prepared(manifest, train, val)
