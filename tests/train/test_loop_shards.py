"""Data-parallel training: at one shard count, 1 worker and N workers write the same
bytes; the default (1 shard) is today's computation and its checkpoint keys."""
from __future__ import annotations

import json

import pytest

from sparktrain.cli import main
from sparktrain.model.config import SCALES
from sparktrain.params import Defaults, StepConfig
from sparktrain.train.job import adhoc_job
from sparktrain.train.runner import run_job
from sparktrain.data.source import source_for

QUIET = dict(progress=lambda line: None)


def _files(project, monkeypatch, out, **knobs) -> dict[str, bytes]:
    monkeypatch.chdir(project)
    job = adhoc_job("data/train/dataset.jsonl", out, None)
    result = run_job(job, StepConfig(outer=2, inner=3, batch_size=8, **knobs),
                              SCALES["tiny"], source_for(job.dataset, Defaults()), **QUIET)
    # perf.json (timings) is committed with the run but is no part of its bytes
    return {name: data for name, data in result.files.items() if name != "perf.json"}


def test_same_bytes_with_one_and_two_workers(project, monkeypatch):
    one = _files(project, monkeypatch, "out/a", shards=3, workers=1)
    two = _files(project, monkeypatch, "out/a", shards=3, workers=2)
    assert one == two
    checkpoint = json.loads(two["checkpoint.json"])
    assert checkpoint["shards"] == 3 and "workers" not in checkpoint
    perf = json.loads((project / "out/a/perf.json").read_text())
    assert perf["workers"] == 2 and perf["shards"] == 3


def test_one_shard_is_the_default_and_is_not_recorded(project, monkeypatch):
    default = _files(project, monkeypatch, "out/a")
    one = _files(project, monkeypatch, "out/a", shards=1, workers=2)
    assert default == one
    assert "shards" not in json.loads(default["checkpoint.json"])
    sharded = _files(project, monkeypatch, "out/a", shards=2, workers=1)
    assert sharded["weights.safetensors"] != default["weights.safetensors"]


@pytest.mark.parametrize("flag, value", [("--shards", "0"), ("--workers", "0"),
                                         ("--shards", "two")])
def test_bad_shard_flags_are_one_line(project, monkeypatch, capsys, flag, value):
    monkeypatch.chdir(project)
    try:
        rc = main(["train", "--dataset", "data/train/dataset.jsonl", "--out", "out/x",
                   flag, value])
    except SystemExit as exc:  # argparse's own refusal
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag.lstrip("-") in err[0], err
    assert not (project / "out/x").exists()
