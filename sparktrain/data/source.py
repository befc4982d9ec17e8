"""The data sources behind data/base.py's interface (corpus folders, JSONL text rows, pairs),
SOURCES, the one table of them, and `source_for`, the one place that asks which a dataset is
(docs/training.md "Data sources and the one loop", "Corpora")."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from sparktrain.data.base import STDLIB, DataSource, EvalSet, TrainingData
from sparktrain.data.corpus import (MAX_FILES, SAMPLERS, Corpus, CorpusFile,
                                    check_splits, is_heldout, read_corpus, read_prepared,
                                    windows_batch, write_pairs_note, write_prepared)
from sparktrain.data.extra import with_extra
from sparktrain.data.pairs import (LOSS_BATCH, RowBatches, json_objects, load_dataset,
                                   load_pairs, loss_batches)
from sparktrain.data.tokenizer import make_tokenizer
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import atomic_write_text, open_input, read_input, sha256_bytes
from sparktrain.core.jobfiles import CORPUS, TOKENIZER
from sparktrain.model.config import flops_per_token

STREAM_BATCH = 16     # windows per forward when measuring a stream's loss
PROBE_WINDOWS = 32    # fixed train windows: the curve's training loss
HELDOUT_WINDOWS = 64  # fixed held-out windows: the curve's held-out loss and bpb
CORPUS_RECORD = ("patterns", "heldout_fraction", "train_files", "heldout_files",
                 "train_bytes", "heldout_bytes", "train_tokens", "heldout_tokens", "extra")


def line_count(path, limit: int = 1 << 31) -> int | None:
    """Newlines (+1) of a readable regular file, read in chunks (a dataset's row bound);
    else None."""
    if not os.path.isfile(path):  # a FIFO would block the open
        return None
    try:
        with open(path, "rb") as f:
            count = 1
            while chunk := f.read(1 << 22):
                count += chunk.count(b"\n")
                if count > limit:
                    break
            return count
    except OSError:
        return None


def spread_windows(stream, seq_len: int, n: int) -> list:
    """n windows spread evenly over a stream: a fixed sample, comparable pass to pass."""
    last = len(stream) - seq_len - 1
    starts = np.unique(np.linspace(0, max(last, 0), n).astype(np.int64))
    return [windows_batch(stream, starts[i:i + STREAM_BATCH], seq_len)
            for i in range(0, len(starts), STREAM_BATCH)]


class CorpusSource:
    """Text files under a root matched by globs, split by a hash of each path."""
    kind = "corpus"
    prompted = False  # a model of it continues text
    streamed = True   # it trains from corpus/: the tokenizer and prepare steps come first
    loss_rows = STREAM_BATCH
    # what the curve's points measure (loss.png's legend)
    curve_labels = (f"training loss, {PROBE_WINDOWS} fixed train windows",
                    f"held-out loss, {HELDOUT_WINDOWS}-window estimate")

    def __init__(self, dataset: str, patterns, heldout_fraction: float, extra=()):
        self.dataset, self.patterns, self.heldout_fraction = dataset, patterns, heldout_fraction
        self.extra = extra  # corpus.extra: site-packages globs, train split only

    @classmethod
    def claims(cls, dataset: str) -> bool:
        return dataset == STDLIB or Path(dataset).is_dir()

    @classmethod
    def from_knobs(cls, dataset: str, knobs, heldout: str | None):
        return cls(dataset, knobs.corpus.glob, knobs.corpus.heldout, knobs.corpus.extra)

    def row_bound(self) -> int | None:
        return None  # windows anywhere in the stream: batch_size of them

    def read(self) -> Corpus:
        return with_extra(read_corpus(self.dataset, self.patterns, self.heldout_fraction),
                          self.extra)

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
        if len(data.val) < seq_len + 1:  # the held-out curve reads whole windows
            raise SparkError(
                f"the held-out split is too short for one context window: {len(data.val)} "
                f"tokens ({m['heldout_bytes']:,} bytes in {m['heldout_files']} file(s)), "
                f"fewer than seq_len + 1 = {seq_len + 1}; add held-out text (raise "
                f"corpus.heldout, or add files or rows) or use a smaller seq_len")
        return TrainingData(
            describe=f"{m['train_tokens']:,} train tokens",
            sampler=SAMPLERS[step.sampling](data.train, seq_len, step.batch_size, step.seed),
            train_set=EvalSet(spread_windows(data.train, seq_len, PROBE_WINDOWS)),
            heldout_set=EvalSet(spread_windows(data.val, seq_len, HELDOUT_WINDOWS),
                                tokenizer.byte_lengths()),
            checkpoint={"dataset_sha256": m["sha256"], "dataset_kind": self.kind,
                        "corpus": {k: m[k] for k in CORPUS_RECORD if k in m},
                        "tokenizer": tokenizer.kind, "tokenizer_sha256": tokenizer_sha256,
                        "heldout_baselines": m["heldout_baselines"]},
            weights_meta={"dataset_sha256": m["sha256"], "tokenizer_sha256": tokenizer_sha256},
            fingerprint={"tokenizer_sha256": tokenizer_sha256, "corpus_sha256": m["sha256"]})


class TextSource(CorpusSource):
    """JSONL rows `{"text": ...}`, each a document split by a hash of its text, then a corpus."""
    kind = "text"

    def __init__(self, dataset: str, heldout_fraction: float):
        super().__init__(dataset, (), heldout_fraction)

    @classmethod
    def claims(cls, dataset: str) -> bool:
        """A file whose first row is an object with a string "text" and no pair fields."""
        try:
            with open_input(dataset, "dataset") as f:
                first = next(json_objects(f, dataset, hashlib.sha256()), None)
        except SparkError:
            return False
        return first is not None and isinstance(first[1].get("text"), str) \
            and not {"prompt", "completion", "messages"} & set(first[1])

    @classmethod
    def from_knobs(cls, dataset: str, knobs, heldout: str | None):
        return cls(dataset, knobs.corpus.heldout)

    def read(self) -> Corpus:
        if not 0 < self.heldout_fraction < 1:
            raise SparkError(f"heldout fraction must be in (0, 1), got {self.heldout_fraction}")
        files = []
        with open_input(self.dataset, "dataset") as f:
            for lineno, row in json_objects(f, self.dataset, hashlib.sha256()):
                if len(files) == MAX_FILES:  # one row is one file of files.json, as a corpus's
                    raise SparkError(f"{self.dataset}: over {MAX_FILES:,} text rows, the limit "
                                     f"a corpus has for its files (prepare and step read "
                                     f"files.json at their cap); join short rows")
                text = row.get("text")
                if not isinstance(text, str):
                    raise SparkError(f"{self.dataset}:{lineno}: 'text' must be a string")
                try:
                    data = text.encode("utf-8")
                except UnicodeEncodeError as err:
                    raise SparkError(f"{self.dataset}:{lineno}: the text holds a lone "
                                     f"surrogate at character {err.start}") from None
                digest = sha256_bytes(data)
                files.append(CorpusFile(f"row-{lineno:09d}", len(data), digest,
                                        is_heldout(digest, self.heldout_fraction), text))
        return check_splits(Corpus(Path(self.dataset).as_posix(), (), self.heldout_fraction,
                                   tuple(files)),
                            f"dataset {self.dataset}", "rows",
                            "add rows or change corpus.heldout")


def tokenizer_record(tokenizer, tokenizer_sha256: str | None) -> dict:
    """A pairs model's tokenizer record: none for bytes (every reader's default), else its own."""
    if tokenizer.kind == "byte":
        return {}
    return {"dataset_kind": "pairs", "tokenizer": tokenizer.kind,
            "tokenizer_sha256": tokenizer_sha256}


class PairsSource:
    """JSONL (prompt, completion) rows, the loss on completion targets; held out: eval.data."""
    kind = "pairs"
    prompted = True   # a model of it answers a prompt ([BOS] prompt [SEP] -> completion)
    streamed = False  # its rows are read and encoded in memory by the step itself
    loss_rows = LOSS_BATCH
    curve_labels = ("training loss, whole dataset", "held-out loss")

    def __init__(self, dataset: str, heldout: str | None = None):
        self.dataset, self.heldout = dataset, heldout

    @classmethod
    def claims(cls, dataset: str) -> bool:
        return True  # any regular file: its rows say what is wrong with it

    @classmethod
    def from_knobs(cls, dataset: str, knobs, heldout: str | None) -> "PairsSource":
        return cls(dataset, heldout)

    def row_bound(self) -> int | None:
        return line_count(self.dataset)  # a batch never holds more rows than the file

    def tokenizer_texts(self) -> list[str]:
        """Each prompt and completion, as encode_pair reads them."""
        return [text for pair in load_pairs(self.dataset)
                for text in (pair.prompt, pair.completion)]

    def prepare(self, folder, tokenizer, tokenizer_sha256: str):
        """No streams: the step reads the rows itself; files.json names the file."""
        return write_pairs_note(folder, self.dataset, read_input(self.dataset, "dataset"))

    def plan(self, cfg, batch_size: int, tokenizer, tokenizer_sha256: str | None) -> dict:
        dataset = load_dataset(self.dataset, cfg.seq_len, tokenizer)
        pairs_per_step = min(batch_size, dataset.n)
        mean_tokens = dataset.n_tokens / dataset.n
        return {"dataset_sha256": dataset.sha256, "dataset_rows": dataset.n,
                "dataset_tokens": dataset.n_tokens,
                "dataset_counted_targets": dataset.n_counted,
                "truncated": dataset.n_truncated, "pairs_per_micro_step": pairs_per_step,
                "flops_per_micro_step": int(round(flops_per_token(cfg) * mean_tokens
                                                  * pairs_per_step)),
                **tokenizer_record(tokenizer, tokenizer_sha256)}

    def training_data(self, folder, model, tokenizer, tokenizer_sha256, step):
        if step.sampling != "random":
            raise SparkError(f"step.sampling {step.sampling} cuts a corpus stream into windows; "
                             "a pairs job already reads its rows in a new order each epoch")
        dataset = load_dataset(self.dataset, model.cfg.seq_len, tokenizer)
        heldout = heldout_sha256 = None
        if self.heldout is not None:
            held = load_dataset(self.heldout, model.cfg.seq_len, tokenizer)
            heldout, heldout_sha256 = EvalSet(loss_batches(held.encoded, model.make_batch)), \
                held.sha256
        record = tokenizer_record(tokenizer, tokenizer_sha256)
        return TrainingData(
            describe=f"{dataset.n} pairs",
            sampler=RowBatches(dataset.encoded, step.batch_size, step.seed, model.make_batch),
            train_set=EvalSet(loss_batches(dataset.encoded, model.make_batch)),
            heldout_set=heldout,
            checkpoint={"dataset_sha256": dataset.sha256, "dataset_n": dataset.n,
                        "dataset_tokens": dataset.n_tokens, "truncated": dataset.n_truncated,
                        **record, **({"heldout": self.heldout} if self.heldout else {})},
            weights_meta={"dataset_sha256": dataset.sha256, **record},
            # a resumed state's curve holds held-out losses: the file's bytes, not only its name
            fingerprint={"dataset_sha256": dataset.sha256, "tokenizer_sha256": tokenizer_sha256,
                         "heldout": self.heldout, "heldout_sha256": heldout_sha256})


# The kinds, most specific first: the first whose claims() is true reads the dataset.
SOURCES: tuple[type, ...] = (CorpusSource, TextSource, PairsSource)


def source_for(dataset: str, knobs, heldout: str | None = None) -> DataSource:
    """`dataset`'s source; `knobs`: the params, `heldout`: pairs measured after every pass."""
    for kind in SOURCES:
        if kind.claims(dataset):
            return kind.from_knobs(dataset, knobs, heldout)
    raise SparkError(f"dataset {dataset}: no data source reads it "
                     f"(known: {', '.join(k.kind for k in SOURCES)})")


def streams(dataset: str) -> bool:
    """Whether `dataset` is text (a folder, @stdlib, JSONL text rows) that trains as a corpus."""
    return any(kind.streamed for kind in SOURCES if kind.claims(dataset))


def trained_on(meta: dict) -> type:
    """The kind of data a model was trained on, as its weights' metadata record it: pairs for
    byte tokens (no tokenizer recorded) or dataset_kind "pairs", else a corpus."""
    pairs = meta.get("tokenizer_sha256") is None or meta.get("dataset_kind") == "pairs"
    return PairsSource if pairs else CorpusSource


def prepare_job(folder: str | Path, source: DataSource, kind: str, vocab_size: int) -> Path:
    """The tokenizer and prepare stages in one call (`spark code train`, the coder proof)."""
    folder = Path(folder)
    tok = make_tokenizer(kind, vocab_size, source.tokenizer_texts if kind != "byte" else list)
    text = tok.to_json()
    # corpus/ first: a source that prepare refuses leaves the job's tokenizer.json as it was
    corpus = source.prepare(folder / CORPUS, tok, sha256_bytes(text.encode("utf-8")))
    atomic_write_text(folder / TOKENIZER, text)
    return corpus
