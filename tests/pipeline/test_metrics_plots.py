"""The fresh repro's metrics, plots and status: the real dvc, offline. (Experiments read
by every tool, and shared through a remote: test_readme_blocks.py, on README's grid; a
queued point, one result per point: test_sweep.py.)"""
from __future__ import annotations

import json

import pytest

from .conftest import EVAL_METRICS, NUMERIC_METRICS, dvc_json, run

pytestmark = pytest.mark.e2e


def test_metrics_show_lists_the_eval_metrics(fresh_repro):
    repo, _ = fresh_repro
    shown = dvc_json(repo, "metrics", "show")
    files = shown[""]["data"]
    assert list(files) == ["out/train/job-dry-001/eval.json"]
    metrics = files["out/train/job-dry-001/eval.json"]["data"]
    for name in NUMERIC_METRICS:
        assert isinstance(metrics[name], (int, float)), name


def test_plots_show_json_returns_the_loss_curve_offline(fresh_repro, tmp_path):
    repo, _ = fresh_repro
    ckpt_path = "out/train/job-dry-001/checkpoint.json"
    curve = json.loads((repo / ckpt_path).read_text())["loss_curve"]
    # -o keeps the rendered images out of the shared repro.
    shown = dvc_json(repo, "plots", "show", "-o", str(tmp_path / "plots"))
    # An empty list anywhere in checkpoint.json (e.g. `frozen_tensors: []`) makes dvc's
    # datapoint finder fail with "'NoneType' object has no attribute 'keys'".
    assert not shown.get("errors"), shown["errors"]
    [plot] = shown["data"][ckpt_path]
    points = plot["content"]["data"]["values"]
    assert [(p["outer"], p["loss"]) for p in points] == \
        [(c["outer"], c["loss"]) for c in curve]
    assert "https://" not in json.dumps(plot["content"]["data"])


def test_plots_show_has_the_dvclive_training_and_heldout_curves(fresh_repro, tmp_path):
    """The step logs each pass through DVCLive; `dvc plots show` draws the held-out curve
    beside the training one, the training loss once (checkpoint.json's: DVCLive's loss.tsv
    holds the same numbers and is an output, not a second panel), whole passes on x."""
    repo, _ = fresh_repro
    curve = json.loads((repo / "out/train/job-dry-001/checkpoint.json").read_text())["loss_curve"]
    shown = dvc_json(repo, "plots", "show", "-o", str(tmp_path / "plots"))
    assert not shown.get("errors"), shown["errors"]
    series = "out/train/job-dry-001/dvclive/plots/metrics/"
    [plot] = shown["data"][series + "heldout_loss.tsv"]
    values = plot["content"]["data"]["values"]
    assert [(int(v["step"]), float(v["heldout_loss"])) for v in values] == \
        [(c["outer"], c["heldout_loss"]) for c in curve]
    assert series + "loss.tsv" not in shown["data"], "the training loss is drawn twice"
    rows = (repo / series / "loss.tsv").read_text().splitlines()[1:]
    assert [float(r.split("\t")[-1]) for r in rows] == [c["loss"] for c in curve]
    for path in ("out/train/job-dry-001/checkpoint.json", series + "heldout_loss.tsv"):
        [plot] = shown["data"][path]
        assert plot["content"]["encoding"]["x"]["axis"] == {"tickMinStep": 1, "format": "d"}
    # held-out bits per byte are declared too (corpus jobs); this pairs job has none:
    # its series is the header only, an empty plot and no error
    assert shown["data"]["out/train/job-dry-001/dvclive/plots/metrics/heldout_bpb_64window_estimate.tsv"] == []


def test_spark_status_shows_the_metric_and_its_detail(fresh_repro):
    repo, _ = fresh_repro
    state = json.loads(run(repo, "spark", "status", "job-dry-001").stdout)
    assert set(state["eval"]) == set(EVAL_METRICS)
    assert {"families", "samples", "n"} <= set(state["eval_detail"])
