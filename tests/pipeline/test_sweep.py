"""Sweeps with the real dvc: `dvc queue start -j 2`, and `spark sweep` on a Dask
LocalCluster on 127.0.0.1 (one worker per usable core, as README's line without
--workers starts it) with a bare git repository and a local folder as the remotes.
A point through both gives the same metrics and the same output hashes."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from sparkhelp import HANG_GUARD_S

from .conftest import (clone, dvc, dvc_json, exp_revs, git, lock_outs, run,
                       shared_checkout, tool_env)

pytestmark = pytest.mark.e2e

def spark(repo, *args):
    return run(repo, sys.executable, "-m", "sparktrain.cli", *args)


def _split(done):
    """(stdout lines, the `sweep: ...` progress lines) of a run that merged both."""
    lines = done.stdout.splitlines()
    return ([ln for ln in lines if not ln.startswith("sweep: ")],
            [ln for ln in lines if ln.startswith("sweep: ")])


@pytest.fixture(scope="module")
def shared(template_repo, tmp_path_factory):
    """A driver checkout whose `origin` is a bare repo and whose default DVC remote is a
    local folder, committed and pushed: what a cluster's workers clone."""
    return shared_checkout(template_repo, tmp_path_factory.mktemp("sweep"))


# README's grid (`spark sweep -S step.lr=0.05,0.1 ...`) and two points that fail: lr=1e30
# diverges in the step stage, -1 is refused by params validation before anything runs.
# One sweep, one Dask cluster, for every claim about points that run and points that fail.
GOOD = (0.05, 0.1)
SWEPT = ("-S", "step.lr=0.05,0.1,1e30,-1", "-S", "step.seed=1")


@pytest.fixture(scope="module")
def swept(shared):
    """`spark sweep` as README writes it, without --workers: the LocalCluster gets one
    worker per usable core (this line once died before any point ran)."""
    done = spark(shared, "sweep", *SWEPT)
    return done, json.loads((shared / "out" / "sweep.json").read_text())


def _queue_results(repo, grid, timeout=HANG_GUARD_S):
    """Queue `grid`, `dvc queue start -j 2`, wait for the workers; {(lr, seed): exp data}."""
    before = {e["name"] for e in _experiments(repo)}
    dvc(repo, "exp", "run", "--queue", *grid)
    # the queue's workers are detached and keep inherited pipes open: no capture here
    started = subprocess.run(["dvc", "queue", "start", "-j", "2"], cwd=repo, env=tool_env(repo),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             timeout=HANG_GUARD_S)
    assert started.returncode == 0
    deadline = time.monotonic() + timeout
    while True:
        status = dvc(repo, "queue", "status").stdout
        if "Queued" not in status and "Running" not in status:
            break
        assert time.monotonic() < deadline, status
        time.sleep(2)
    assert "Failed" not in status, status
    found = {}
    for exp in _experiments(repo):
        if exp["name"] not in before:
            step = exp["data"]["params"]["params.yaml"]["data"]["step"]
            point = (step["lr"], step["seed"])
            assert point not in found, f"two experiments for the point {point}"
            found[point] = exp
    return found


def _experiments(repo) -> list[dict]:
    return exp_revs(dvc_json(repo, "exp", "show"))


def test_sweep_runs_every_point_on_the_cluster_and_prints_the_comparison(swept):
    done, doc = swept
    table, progress = _split(done)
    assert done.returncode == 1, done.stdout      # two points failed
    assert "Traceback" not in done.stdout
    from sparktrain.runtime import usable_cores

    assert any(f"on {usable_cores()} Dask worker(s)" in ln for ln in progress), progress
    assert [p["params"] for p in doc["points"]] == [
        {"step.lr": lr, "step.seed": 1} for lr in (*GOOD, 1e30, -1)]
    good = doc["points"][:2]
    assert all(p["state"] == "done" and p["error"] is None for p in good)
    weights = {p["outputs"]["out/train/job-dry-001/weights.safetensors"] for p in good}
    assert len(weights) == 2, "every point trained its own weights"
    assert table[0].split()[:4] == ["Experiment", "State", "step.lr", "step.seed"]
    assert [row.split()[0] for row in table[2:6]] == [p["name"] for p in doc["points"]]


def test_a_failed_point_is_reported_and_the_others_finish(swept):
    done, doc = swept
    points = {p["params"]["step.lr"]: p for p in doc["points"]}
    assert all(points[lr]["state"] == "done" and points[lr]["metrics"] for lr in GOOD)
    assert points[1e30]["state"] == "failed"
    assert "stage step: training failed" in points[1e30]["error"]
    assert "diverged" in points[1e30]["error"]
    assert points[-1]["state"] == "failed"
    assert points[-1]["error"] == "params: step.lr must be > 0.0, got -1.0"
    table, _ = _split(done)
    assert f"{points[1e30]['name']} failed: dvc exp run exited" in "\n".join(table)


def test_points_equal_the_same_grid_through_dvc_queue(shared, swept):
    # one of the grid's points through DVC's own queue: the same metrics, the same bytes
    _, doc = swept
    [point] = [p for p in doc["points"] if p["params"]["step.lr"] == 0.1]
    queued = _queue_results(shared, ("-S", "step.lr=0.1", "-S", "step.seed=1"))
    assert list(queued) == [(0.1, 1)], sorted(queued)   # one result per point
    exp = queued[(0.1, 1)]
    metrics = {path: entry["data"] for path, entry in exp["data"]["metrics"].items()}
    assert isinstance(metrics["out/train/job-dry-001/eval.json"]["loss"], float)
    assert point["metrics"] == metrics
    lock = git(shared, "show", f"{exp['rev']}:dvc.lock")
    hashes = {path: md5 for path, (_, md5) in lock_outs(yaml.safe_load(lock)).items()}
    assert point["outputs"] == hashes


def test_a_rerun_skips_existing_points_and_writes_the_same_records(shared, swept):
    # the grid's two points again: both on the remote, so no cluster starts, and the
    # comparison is the first sweep's, record for record
    _, doc = swept
    done = spark(shared, "sweep", "-S", "step.lr=0.05,0.1", "-S", "step.seed=1",
                 "--workers", "2", "-o", "again.json")
    assert done.returncode == 0, done.stdout
    _, progress = _split(done)
    assert sum("not run again" in ln for ln in progress) == 2, progress
    assert not any("Dask worker" in ln for ln in progress), progress
    again = json.loads((shared / "again.json").read_text())
    assert again["baseline"] == doc["baseline"]
    assert again["points"] == doc["points"][:2]


def test_sweep_mistakes_are_one_line_before_anything_runs(shared, tmp_path):
    def one_line(done, needle):
        assert done.returncode == 2, done.stdout
        lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], done.stdout

    one_line(spark(shared, "sweep"), "nothing to sweep")
    one_line(spark(shared, "sweep", "-S", "step.oter=1"), "no key step.oter")
    one_line(spark(shared, "sweep", "-S", "step.lr=0.1", "--git-remote", "nope"),
             "no git remote 'nope'")
    one_line(spark(shared, "sweep", "-S", "step.lr=0.1", "--dvc-remote", "nope"),
             "DVC remote 'nope' is not in the committed .dvc/config")
    one_line(spark(tmp_path, "sweep", "-S", "step.lr=0.1"), "not inside a Spark Train project")

    local = clone(shared, tmp_path / "unpushed")
    git(local, "commit", "-q", "--allow-empty", "-m", "not pushed")
    one_line(spark(local, "sweep", "-S", "step.lr=0.1"), "is not on git remote 'origin'")
    (local / "params.yaml").write_text((local / "params.yaml").read_text() + "\n")
    one_line(spark(local, "sweep", "-S", "step.lr=0.1"), "uncommitted changes (params.yaml)")
