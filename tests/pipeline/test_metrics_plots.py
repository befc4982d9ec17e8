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
    """The step logs each pass through DVCLive; dvc.yaml declares both series, so
    `dvc plots show` draws the held-out curve beside the training one."""
    repo, _ = fresh_repro
    curve = json.loads((repo / "out/train/job-dry-001/checkpoint.json").read_text())["loss_curve"]
    shown = dvc_json(repo, "plots", "show", "-o", str(tmp_path / "plots"))
    assert not shown.get("errors"), shown["errors"]
    for name, key in (("loss", "loss"), ("heldout_loss", "heldout_loss")):
        path = f"out/train/job-dry-001/dvclive/plots/metrics/{name}.tsv"
        [plot] = shown["data"][path]
        values = plot["content"]["data"]["values"]
        assert [(int(v["step"]), float(v[name])) for v in values] == \
            [(c["outer"], c[key]) for c in curve]
    # held-out bits per byte are declared too (corpus jobs); this pairs job has none:
    # its series is the header only, an empty plot and no error
    assert shown["data"]["out/train/job-dry-001/dvclive/plots/metrics/heldout_bpb_64window_estimate.tsv"] == []


def test_spark_status_shows_the_metric_and_its_detail(fresh_repro):
    repo, _ = fresh_repro
    state = json.loads(run(repo, "spark", "status", "job-dry-001").stdout)
    assert set(state["eval"]) == set(EVAL_METRICS)
    assert {"families", "samples", "n"} <= set(state["eval_detail"])
