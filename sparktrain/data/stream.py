"""Token streams on disk (nanoGPT's train.bin / val.bin: [BOS] + tokens + [EOS] per file, flat
little-endian uint8 or uint16, memory-mapped); seeded windows, whole-stream windows."""
from __future__ import annotations

import os
from typing import Iterator, Sequence

import numpy as np

from sparktrain.vocab import token_dtype
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import atomic_write_bytes
from sparktrain.model.base import TokenBatch


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
