"""Shared helpers of the reliability tests: a trained job, folder snapshots."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from sparkhelp import ROOT, run_spark

FAST = ["--outer", "1", "--inner", "2"]
TRAIN = ["train", "--dataset", "data/train/dataset.jsonl"]


def snapshot(folder):
    """Every file under `folder` (dot files included) with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_project(dest):
    for sub in ("data", "params.yaml"):
        src = ROOT / sub
        if src.is_dir():
            shutil.copytree(src, dest / sub)
        else:
            shutil.copy(src, dest / sub)
    return dest


def train_j(project, knobs=FAST):
    """`project` with a job trained at out/j with `knobs`."""
    rc, _, err = run_spark(TRAIN + ["--out", "out/j"] + knobs, cwd=project)
    assert rc == 0, err
    return project


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A project with one quickly trained job at out/j: (project, weights path)."""
    project = train_j(copy_project(tmp_path_factory.mktemp("rel")))
    return project, project / "out/j/weights.safetensors"


def git(project, *args):
    subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True)


def git_project(root):
    """`root` as a git project (params.yaml, dvc.yaml, data tracked; out/ ignored) with
    one quickly trained job at out/j."""
    copy_project(root)
    (root / "dvc.yaml").write_text("stages: {}\n")
    (root / ".gitignore").write_text("out/\n")
    git(root, "init", "-q")
    git(root, "add", "params.yaml", "dvc.yaml", ".gitignore", "data")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    return train_j(root)
