"""Sweeps, sharing through a remote, metrics and plots: the real dvc, offline."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .conftest import dvc, dvc_json, git, lock_outs, ran_stages, run

pytestmark = pytest.mark.e2e

EVAL_METRICS = ("loss", "perplexity", "next_token_accuracy", "exact_match")


def _commit_lock(repo) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "lock after repro")


# A queued grid (one result per point, the points' losses apart) is
# tests/pipeline/test_sweep.py's test_points_equal_the_same_grid_through_dvc_queue;
# `dvc exp run --run-all` runs as README's "Sweep and compare" writes it
# (test_readme_blocks.py).


def test_metrics_show_lists_the_eval_metrics(fresh_repro):
    repo, _ = fresh_repro
    shown = dvc_json(repo, "metrics", "show")
    files = shown[""]["data"]
    assert list(files) == ["out/train/job-dry-001/eval.json"]
    metrics = files["out/train/job-dry-001/eval.json"]["data"]
    for name in EVAL_METRICS:
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


README = Path(__file__).resolve().parents[2] / "README.md"


def share_block() -> str:
    """README's "Share results" shell block, as a user would paste it."""
    text = README.read_text()
    section = text.split("\n## Share results\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_share_results_as_the_readme_writes_it(repro_copy, tmp_path):
    """The block run as written, its own bare repo as origin and a folder as the
    DVC remote, after one experiment: a second clone with every output pulled (none
    in git), clean, nothing to run, and the experiment's metrics in the block's
    `dvc exp show`. (It is also the push-then-pull check: `dvc push`, a `git clone`,
    `dvc pull` and a `dvc repro` that runs nothing.)"""
    repo = repro_copy
    origin, store = tmp_path / "origin.git", tmp_path / "store"
    _commit_lock(repo)
    # an experiment beside the workspace's run (--temp: the workspace stays as committed)
    dvc(repo, "exp", "run", "--temp", "-n", "lr05", "-S", "step.lr=0.05")
    block = share_block()
    for placeholder in ("/path/to/shared/dir", "/path/to/origin.git", "<exp>"):
        assert placeholder in block, placeholder
    script = (block.replace("/path/to/shared/dir", str(store))
              .replace("/path/to/origin.git", str(origin)).replace("<exp>", "lr05"))
    done = run(repo, "bash", "-e", "-c", script)
    assert done.returncode == 0, done.stdout
    other = repo / "spark-train"
    assert (other / ".dvc" / "config").read_text().count(str(store)) == 1
    lock = yaml.safe_load((other / "dvc.lock").read_text())
    for path in lock_outs(lock):
        assert (other / path).exists(), f"{path} not pulled"
    assert dvc(other, "status", "-q", check=False).returncode == 0
    # the outputs came from the DVC remote, not git; nothing runs or is restored from a cache
    assert git(other, "ls-files", "out").strip() == ""
    again = dvc(other, "repro")
    assert ran_stages(again.stdout) == set(), again.stdout
    assert "is cached" not in again.stdout
    [show] = [line.split("#")[0].split()[1:] for line in block.splitlines()
              if line.startswith("dvc exp show")]
    assert "--all-commits" not in show and "-A" not in show, show
    shown = dvc_json(other, *show)
    [exp] = [rev["data"] for baseline in shown for e in baseline.get("experiments") or []
             for rev in e.get("revs") or [] if rev.get("name") == "lr05"] or [shown]
    metrics = exp["metrics"]["out/train/job-dry-001/eval.json"]["data"]
    for name in EVAL_METRICS:
        assert isinstance(metrics[name], (int, float)), (name, metrics)
