"""One loop for every data source: pairs, a corpus folder and JSONL text rows go
through the same set-up, micro-step, learned-check and commit, and each kind is
picked by the one table of data sources."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import sparktrain.train.loop as loop
from sparktrain.train.runner import run_job
from sparkhelp import ROOT
from sparktrain.data.source import (SOURCES, CorpusSource, PairsSource, TextSource, prepare_job,
                                    source_for)
from sparktrain.core.errors import SparkError
from sparktrain.model.config import SCALES
from sparktrain.params import CorpusConfig, Defaults, StepConfig
from sparktrain.train.job import adhoc_job

STEP = StepConfig(outer=2, inner=3, batch_size=4, lr=0.05)
QUIET = dict(progress=lambda line: None)
CORPUS = ROOT / "data/corpus/tiny"
KNOBS = Defaults(corpus=CorpusConfig(glob="*.py", heldout=0.3))  # the top-level 20: a few held out


def _text_rows(path: Path) -> Path:
    """The tiny corpus as JSONL rows {"text": ...}, one file a row."""
    with open(path, "w") as f:
        for p in sorted(CORPUS.glob("*.py")):
            f.write(json.dumps({"text": p.read_text()}) + "\n")
    return path


def _calls(monkeypatch) -> dict:
    """Count the calls of the loop's one set-up, micro-step, check and commit."""
    counts = {}
    for module, name in ((loop, "_set_up"), (loop, "apply_update"),
                         (loop, "check_learned"), (loop, "commit")):
        real = getattr(module, name)

        def wrapped(*a, _real=real, _name=name, **k):
            counts[_name] = counts.get(_name, 0) + 1
            return _real(*a, **k)
        monkeypatch.setattr(module, name, wrapped)
    return counts


def test_the_source_table_picks_each_kind(tmp_path):
    text = _text_rows(tmp_path / "rows.jsonl")
    assert SOURCES[-1] is PairsSource  # the fallback: any file, its rows say what is wrong
    assert type(source_for(str(CORPUS), KNOBS)) is CorpusSource
    assert type(source_for("@stdlib", KNOBS)) is CorpusSource
    assert type(source_for(str(text), KNOBS)) is TextSource
    assert type(source_for("data/train/dataset.jsonl", KNOBS)) is PairsSource


@pytest.mark.parametrize("kind", ["pairs", "corpus", "text"])
def test_every_kind_goes_through_the_one_loop(kind, tmp_path, monkeypatch):
    dataset = {"pairs": str(ROOT / "data/train/dataset.jsonl"), "corpus": str(CORPUS),
               "text": str(_text_rows(tmp_path / "rows.jsonl"))}[kind]
    job = adhoc_job(dataset, str(tmp_path / "job"), None)
    source = source_for(dataset, KNOBS, heldout=str(ROOT / "data/eval/tiny_heldout.jsonl"))
    prepare_job(job.out_dir, source, "byte", 0)
    counts = _calls(monkeypatch)
    ck = run_job(job, STEP, SCALES["tiny"], source, **QUIET).checkpoint
    assert counts == {"_set_up": 1, "apply_update": 6, "check_learned": 1, "commit": 1}
    assert ck["loss_after"] < ck["loss_before"]
    assert all("heldout_loss" in point for point in ck["loss_curve"])
    assert ck.get("dataset_kind", "pairs") == kind


def test_text_rows_split_by_content_and_score_in_bits_per_byte(tmp_path):
    rows = _text_rows(tmp_path / "rows.jsonl")
    source = source_for(str(rows), KNOBS)
    corpus = source.read()
    assert corpus.train and corpus.heldout
    again = _text_rows(tmp_path / "again.jsonl")  # the same rows: the same split
    assert [f.heldout for f in source_for(str(again), KNOBS).read().files] == \
        [f.heldout for f in corpus.files]
    job = adhoc_job(str(rows), str(tmp_path / "job"), None)
    prepare_job(job.out_dir, source, "byte", 0)
    files = json.loads((job.out_dir / "corpus/files.json").read_text())
    assert files["heldout_bytes"] == sum(f.size for f in corpus.heldout)
    assert 0 < files["heldout_baselines"]["zlib9_bpb"] < 8


def test_a_text_row_without_text_is_one_line(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "a"}\n{"text": 3}\n')
    with pytest.raises(SparkError, match=r"rows.jsonl:2: 'text' must be a string"):
        source_for(str(rows), KNOBS).read()
