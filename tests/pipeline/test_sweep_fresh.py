"""The README's one-machine sweep on a fresh clone with no remotes at all, run from
a subfolder: `spark sweep` makes a local bare git repository and a local DVC store
under out/, says so, and writes out/sweep.json at the project root; `spark compare`
from the same subfolder draws out/compare.png there too."""
from __future__ import annotations

import json
import sys

import pytest

from .conftest import clone, git, run

pytestmark = pytest.mark.e2e


def spark(cwd, *args):
    return run(cwd, sys.executable, "-m", "sparktrain.cli", *args)


# One point: what this test claims (the local remotes, the subfolder, the root's files) holds
# for any grid; that every point of a grid trains its own weights on the LocalCluster is
# test_sweep.py's (its grid, its two workers), each point here a full pipeline in a clone.
GRID = ("-S", "step.lr=0.05", "-S", "step.seed=1")


def test_a_fresh_clone_without_remotes_sweeps_from_a_subfolder(template_repo, tmp_path):
    repo = clone(template_repo, tmp_path / "repo")
    assert git(repo, "remote").strip() == ""
    sub = repo / "data"
    done = spark(sub, "sweep", *GRID, "--workers", "2")
    assert done.returncode == 0, done.stdout
    assert "Traceback" not in done.stdout
    assert "local bare git repository ../out/sweep-remote/git" in done.stdout, done.stdout
    assert any("sweep: 1/1 points" in ln and "1 done, 0 failed" in ln
               for ln in done.stdout.splitlines()), done.stdout
    doc = json.loads((repo / "out" / "sweep.json").read_text())
    assert [p["state"] for p in doc["points"]] == ["done"]
    assert [p["params"] for p in doc["points"]] == [{"step.lr": 0.05, "step.seed": 1}]
    assert doc["points"][0]["outputs"]["out/train/job-dry-001/weights.safetensors"]
    assert not (sub / "sweep.json").exists() and not (sub / "out").exists()
    # the user's git config and committed files are untouched
    assert git(repo, "remote").strip() == ""
    assert git(repo, "status", "--porcelain", "--untracked-files=no").strip() == ""
    # a second sweep finds the points on the local remote
    again = spark(sub, "sweep", *GRID, "--workers", "2")
    assert again.returncode == 0 and again.stdout.count("not run again") == 1, again.stdout

    drawn = spark(sub, "compare")
    assert drawn.returncode == 0, drawn.stdout
    assert (repo / "out" / "compare.png").is_file() and not (sub / "out").exists()
    assert "wrote ../out/compare.png" in drawn.stdout
