"""The corpus data source: a folder of text files (or the standard library) as a token stream
per split, trained in seeded windows, scored in bits per byte (docs/training.md "Corpora")."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sparktrain.data.base import EvalSet, TrainingData, measure
from sparktrain.data.bpb import bits_per_byte
from sparktrain.data.corpus import STDLIB, Corpus, read_corpus
from sparktrain.data.prepare import read_prepared, write_prepared
from sparktrain.data.stream import (WindowSampler, sliding_batches, stream_batches,
                                    windows_batch)
from sparktrain.core.errors import SparkError
from sparktrain.model.build import build_model
from sparktrain.model.config import flops_per_token

LOSS_BATCH = 16       # windows per forward when measuring a stream's loss
PROBE_WINDOWS = 32    # fixed train windows: the curve's training loss
HELDOUT_WINDOWS = 64  # fixed held-out windows: the curve's held-out loss and bpb
CORPUS_RECORD = ("patterns", "heldout_fraction", "train_files", "heldout_files",
                 "train_bytes", "heldout_bytes", "train_tokens", "heldout_tokens")


def spread_windows(stream, seq_len: int, n: int) -> list:
    """n windows spread evenly over a stream: a fixed sample, comparable pass to pass."""
    last = len(stream) - seq_len - 1
    starts = np.unique(np.linspace(0, max(last, 0), n).astype(np.int64))
    return [windows_batch(stream, starts[i:i + LOSS_BATCH], seq_len)
            for i in range(0, len(starts), LOSS_BATCH)]


class CorpusSource:
    """Text files under a root matched by globs, split by a hash of each path."""
    kind = "corpus"
    prompted = False  # a model of it continues text
    streamed = True   # it trains from corpus/: the tokenizer and prepare steps come first
    loss_rows = LOSS_BATCH

    def __init__(self, dataset: str, patterns, heldout_fraction: float):
        self.dataset, self.patterns, self.heldout_fraction = dataset, patterns, heldout_fraction

    @classmethod
    def claims(cls, dataset: str) -> bool:
        return dataset == STDLIB or Path(dataset).is_dir()

    @classmethod
    def from_knobs(cls, dataset: str, knobs, heldout: str | None):
        return cls(dataset, knobs.corpus.glob, knobs.corpus.heldout)

    def row_bound(self) -> int | None:
        return None  # windows anywhere in the stream: batch_size of them

    def read(self) -> Corpus:
        return read_corpus(self.dataset, self.patterns, self.heldout_fraction)

    def tokenizer_texts(self) -> list[str]:
        return [f.text for f in self.read().train]

    def prepare(self, folder, tokenizer, tokenizer_sha256: str):
        return write_prepared(folder, self.read(), tokenizer, tokenizer_sha256)

    def plan(self, cfg, batch_size: int, tokenizer, tokenizer_sha256: str | None) -> dict:
        tokens = batch_size * cfg.seq_len
        return {"dataset_kind": self.kind, "windows_per_micro_step": batch_size,
                "tokens_per_micro_step": tokens,
                "flops_per_micro_step": flops_per_token(cfg) * tokens}

    def training_data(self, folder, model, tokenizer, tokenizer_sha256, step) -> TrainingData:
        if not model.cfg.train_attn:
            raise SparkError(f"a {self.kind} job needs the attention model (train_attn: true)")
        data = read_prepared(Path(folder), tokenizer_sha256)
        m, seq_len = data.manifest, model.cfg.seq_len
        return TrainingData(
            describe=f"{m['train_tokens']:,} train tokens",
            sampler=WindowSampler(data.train, seq_len, step.batch_size, step.seed),
            train_set=EvalSet(spread_windows(data.train, seq_len, PROBE_WINDOWS)),
            heldout_set=EvalSet(spread_windows(data.val, seq_len, HELDOUT_WINDOWS),
                                tokenizer.byte_lengths()),
            checkpoint={"dataset_sha256": m["sha256"], "dataset_kind": self.kind,
                        "corpus": {k: m[k] for k in CORPUS_RECORD},
                        "tokenizer": tokenizer.kind, "tokenizer_sha256": tokenizer_sha256,
                        "heldout_baselines": m["heldout_baselines"]},
            weights_meta={"dataset_sha256": m["sha256"], "tokenizer_sha256": tokenizer_sha256},
            fingerprint={"tokenizer_sha256": tokenizer_sha256, "corpus_sha256": m["sha256"]})

    def evaluate(self, folder, params, cfg, tokenizer, tokenizer_sha256, eval_cfg) -> dict:
        """The whole held-out stream, every target once: loss and bits per byte beside the
        compressors, in windows apart (`bpb`) and every eval.stride tokens (`bpb_sliding`)."""
        data = read_prepared(Path(folder), tokenizer_sha256)
        model = build_model(cfg)
        stride = sliding_stride(eval_cfg, cfg.seq_len)
        total, count = self._stream_score(model, params, data, tokenizer, stream_batches(
            data.val, cfg.seq_len, LOSS_BATCH, tokenizer.eos))
        sliding, _ = self._stream_score(model, params, data, tokenizer, sliding_batches(
            data.val, cfg.seq_len, stride, LOSS_BATCH, tokenizer.eos))
        loss, nbytes = total / count, data.heldout_bytes
        base = data.manifest["heldout_baselines"]
        return {"mode": self.kind, "loss": loss, "perplexity": math.exp(loss),
                "bpb": bits_per_byte(total, nbytes), "zlib9_bpb": base["zlib9_bpb"],
                "bpb_sliding": bits_per_byte(sliding, nbytes), "sliding_stride": stride,
                "lzma9e_bpb": base["lzma9e_bpb"], "heldout_bytes": base["bytes"],
                "heldout_targets": count, "tokenizer": tokenizer.kind, "vocab": tokenizer.vocab}

    @staticmethod
    def _stream_score(model, params, data, tokenizer, batches) -> tuple[float, int]:
        """(summed nats, targets) of batches that count every held-out target once."""
        batches = list(batches)
        total, count, nbytes = measure([model.batch_loss(params, b) for b in batches], batches,
                                       tokenizer.byte_lengths())
        if nbytes != data.heldout_bytes:
            raise SparkError(f"held-out tokens stand for {nbytes} bytes, the corpus has "
                             f"{data.heldout_bytes}; run the prepare stage again")
        return total, count


def sliding_stride(eval_cfg, seq_len: int) -> int:
    """eval.stride, default a quarter of the window; at most seq_len."""
    stride = eval_cfg.stride or max(seq_len // 4, 1)
    if stride > seq_len:
        raise SparkError(f"eval.stride {stride} is above seq_len {seq_len}")
    return stride
