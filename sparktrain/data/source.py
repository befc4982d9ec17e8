"""SOURCES, the one table of data kinds (data/base.py's interface), and `source_for`, the one
place that asks which a dataset is (docs/training.md "Data sources and the one loop")."""
from __future__ import annotations

from pathlib import Path

from sparktrain.data.base import DataSource
from sparktrain.data.corpus_source import CorpusSource
from sparktrain.data.pairs_source import PairsSource
from sparktrain.data.text import TextSource
from sparktrain.data.tokenizer import make_tokenizer
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import atomic_write_text, sha256_bytes
from sparktrain.core.jobfiles import CORPUS, TOKENIZER


# The kinds, most specific first: the first whose claims() is true reads the dataset.
SOURCES: tuple[type, ...] = (CorpusSource, TextSource, PairsSource)


def source_for(dataset: str, knobs, heldout: str | None = None) -> DataSource:
    """`dataset`'s source; `knobs`: the params, `heldout`: pairs measured after every pass."""
    for kind in SOURCES:
        if kind.claims(dataset):
            return kind.from_knobs(dataset, knobs, heldout)
    raise SparkError(f"dataset {dataset}: no data source reads it "
                     f"(known: {', '.join(k.kind for k in SOURCES)})")


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
