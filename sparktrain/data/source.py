"""Data sources: what a job trains on, behind one interface (docs/training.md
"Data sources").

A job's `dataset` names its data; `source_for` picks the source kind from the
one table SOURCES (the first kind that claims the dataset), and nothing else in
the project asks which kind it has. Each kind answers the same questions:

- `tokenizer_texts()`: the texts a BPE tokenizer is trained on (train split only);
- `prepare(folder, tokenizer, sha256)`: the prepare stage's files under corpus/;
- `plan(cfg, batch_size, tokenizer)`: the counts train-status writes;
- `training_data(folder, model, tokenizer, sha256, step)`: a TrainingData, the
  seeded sampler of micro-batches (resumable), the fixed sets measured after
  every outer pass, and what the checkpoint and the weights record about the data;
- `evaluate(folder, params, cfg, tokenizer, sha256, eval_cfg)`: the eval
  stage's metrics on the held-out data.

A new kind is one module with a class like these and one row in SOURCES.
"""
from __future__ import annotations

from pathlib import Path

from sparktrain.data.base import DataSource
from sparktrain.data.corpus_source import CorpusSource
from sparktrain.data.pairs_source import PairsSource
from sparktrain.data.text import TextSource
from sparktrain.data.tokenizer import is_pairs_model, make_tokenizer
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import atomic_write_text, sha256_bytes
from sparktrain.core.jobfiles import CORPUS, TOKENIZER


# The kinds, most specific first: the first whose claims() is true reads the dataset.
SOURCES: tuple[type, ...] = (CorpusSource, TextSource, PairsSource)


def source_for(dataset: str, knobs, heldout: str | None = None) -> DataSource:
    """The data source of a job's dataset. `knobs` is the params (its corpus
    section); `heldout` a JSONL file of pairs measured after every pass."""
    for kind in SOURCES:
        if kind.claims(dataset):
            return kind.from_knobs(dataset, knobs, heldout)
    raise SparkError(f"dataset {dataset}: no data source reads it "
                     f"(known: {', '.join(k.kind for k in SOURCES)})")


def trained_on(meta: dict) -> type:
    """The kind of data a model was trained on, from what its source recorded in the
    weights' metadata: generate and eval ask it (`.prompted`), never guess it."""
    return PairsSource if is_pairs_model(meta) else CorpusSource


def prepare_job(folder: str | Path, source: DataSource, kind: str, vocab_size: int) -> Path:
    """The tokenizer and prepare stages in one call (`spark code train`, the coder
    proof): tokenizer.json trained on the source's train split, then corpus/."""
    folder = Path(folder)
    tok = make_tokenizer(kind, vocab_size, source.tokenizer_texts if kind != "byte" else list)
    text = tok.to_json()
    # corpus/ first: a source that prepare refuses leaves the job's tokenizer.json as it was
    corpus = source.prepare(folder / CORPUS, tok, sha256_bytes(text.encode("utf-8")))
    atomic_write_text(folder / TOKENIZER, text)
    return corpus
