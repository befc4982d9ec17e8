"""A held-out split shorter than one context window is refused before training, in one
line that gives the split's size and what to change (issue 55; it was an IndexError)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import sparktrain.train.loop as loop
from sparktrain.train.runner import run_job
from sparkhelp import ROOT, run_spark
from sparktrain.core.errors import SparkError
from sparktrain.data.source import prepare_job, source_for
from sparktrain.model.config import SCALES
from sparktrain.params import CorpusConfig, Defaults, StepConfig
from sparktrain.train.job import adhoc_job

CORPUS = ROOT / "data/corpus/tiny"
# at this fraction none of the tiny corpus's files is held out, and each of these rows is
# (the split hashes a row's text): a 1-byte and a 35-byte held-out split
FRACTION = 0.02
SHORT = {"1 byte": "4", "35 bytes": "5f" * 17 + "5"}
KNOBS = Defaults(corpus=CorpusConfig(heldout=FRACTION))


def rows_with_heldout(path: Path, held: str) -> Path:
    with open(path, "w") as f:
        for p in sorted(CORPUS.glob("*.py")):
            f.write(json.dumps({"text": p.read_text()}) + "\n")
        f.write(json.dumps({"text": held}) + "\n")
    return path


@pytest.mark.parametrize("size", sorted(SHORT))
def test_a_heldout_split_shorter_than_a_window_is_refused_before_training(size, tmp_path,
                                                                           monkeypatch):
    rows = rows_with_heldout(tmp_path / "rows.jsonl", SHORT[size])
    source = source_for(str(rows), KNOBS)
    corpus = source.read()
    assert [f.text for f in corpus.heldout] == [SHORT[size]]  # the split this test means
    job = adhoc_job(str(rows), str(tmp_path / "job"), None)
    prepare_job(job.out_dir, source, "byte", 0)
    trained = []
    monkeypatch.setattr(loop, "apply_update", lambda *a: trained.append(a))
    with pytest.raises(SparkError) as err:
        run_job(job, StepConfig(outer=1, inner=1, batch_size=2),
                              SCALES["tiny"], source, progress=lambda line: None)
    line = str(err.value)
    assert "held-out split is too short for one context window" in line
    assert f"({len(SHORT[size].encode())} bytes in 1 file(s))" in line
    assert f"seq_len + 1 = {SCALES['tiny'].seq_len + 1}" in line and "corpus.heldout" in line
    assert trained == []                                  # refused before a micro-step


def test_spark_train_refuses_it_in_one_line(tmp_path):
    rows = rows_with_heldout(tmp_path / "rows.jsonl", SHORT["1 byte"])
    knobs = yaml.safe_load((ROOT / "params.yaml").read_text())
    knobs["corpus"]["heldout"], knobs["tokenizer"] = FRACTION, "byte"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(knobs))
    rc, _, err = run_spark(["train", "--dataset", rows, "--out", "out/short", "--outer", "1",
                            "--inner", "1", "--params", "p.yaml"], cwd=tmp_path)
    # after prepare's progress lines (the tokens are counted there), one error line
    assert rc == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("spark: error: the held-out split is too short")
    assert not (tmp_path / "out/short").exists()        # a folder it made goes whole
