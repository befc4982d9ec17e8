"""The data source interface: what every kind of data (listed in data/source.py)
gives the loop, the stages and eval (docs/training.md "Data sources and the one loop"); bits
per byte, one scale for byte and BPE models and compressors (data/baselines.py): nats over
the text's bytes."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np

# The one dataset name that is not a path: the default proof corpus, the running
# interpreter's standard library (a job names it; train/job.py checks it without the corpus)
STDLIB = "@stdlib"


@dataclass(frozen=True)
class EvalSet:
    """Fixed, re-iterable batches to measure, and each id's bytes of text for bits per byte."""
    batches: Iterable
    byte_lengths: np.ndarray | None = None  # (V,)


@dataclass
class TrainingData:
    """What the loop trains on, laid out for one model."""
    describe: str                 # "57 pairs", "1,234,567 train tokens": progress lines
    sampler: object               # next() -> batch; state() -> JSON; set_state(state)
    train_set: EvalSet            # the loss_curve's training loss after each pass
    heldout_set: EvalSet | None   # the held-out loss (and bpb) after each pass
    checkpoint: dict              # what checkpoint.json records about the data
    weights_meta: dict            # what the weights' metadata records about the data
    fingerprint: dict             # what a resume state must match


class DataSource(Protocol):
    kind: str
    dataset: str
    loss_rows: int  # rows of one whole-set loss batch (the memory estimate)
    prompted: bool  # a model of it answers a prompt (pairs) rather than continues text
    streamed: bool  # it trains from corpus/ streams the tokenizer + prepare steps write

    @classmethod
    def claims(cls, dataset: str) -> bool: ...

    def row_bound(self) -> int | None:
        """At most this many rows in a micro-batch (None: no bound from the data)."""

    def tokenizer_texts(self) -> list[str]: ...

    def prepare(self, folder: Path, tokenizer, tokenizer_sha256: str) -> Path: ...

    def plan(self, cfg, batch_size: int, tokenizer, tokenizer_sha256: str | None) -> dict: ...

    def training_data(self, folder: Path, model, tokenizer, tokenizer_sha256: str | None,
                      step) -> TrainingData: ...

    # Held-out scoring builds a model, so it is not a source's: data/heldout.py.


def measure(losses, batches, byte_lengths=None) -> tuple[float, int, int]:
    """(summed nats, counted targets, their bytes of text) of batches' (sum, count), in order."""
    total, count = 0.0, 0
    for s, c in losses:
        total += s
        count += c
    nbytes = 0 if byte_lengths is None else sum(
        int(byte_lengths[batch.targets[batch.mask > 0]].sum()) for batch in batches)
    return total, count, nbytes


def score(losses, evalset: EvalSet) -> dict:
    """The mean loss of a set (and its bits per byte when the set knows its bytes)."""
    total, count, nbytes = measure(losses, evalset.batches, evalset.byte_lengths)
    result = {"loss": total / max(count, 1)}
    if evalset.byte_lengths is not None:
        result["bpb"] = bits_per_byte(total, nbytes)
    return result


def bits_per_byte(total_nats: float, n_bytes: int) -> float:
    if n_bytes <= 0:
        raise ValueError("bits per byte needs at least one byte")
    return total_nats / math.log(2) / n_bytes
