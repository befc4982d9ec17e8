"""Shared helpers of the reliability tests: a trained job, folder snapshots."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from sparkhelp import ROOT, run_spark

FAST = ["--outer", "1", "--inner", "2"]
TRAIN = ["train", "--dataset", "data/train/dataset.jsonl"]


def ctrl_c_at_third_step(patch) -> None:
    """Ctrl-C at the loop's third micro-step (pass 2 of 2-step passes), once; `patch` a
    monkeypatch or its context."""
    from sparktrain.train import loop

    real, calls = loop.apply_update, [0]

    def dies(*a):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return real(*a)
    patch.setattr(loop, "apply_update", dies)


def killed_in_pass_two(root, monkeypatch, knobs, *, as_sigkill=False):
    """`root`'s job out/j, trained with `knobs` (a state saved every pass) and stopped by
    Ctrl-C in pass 2, after the state of pass 1 was saved. as_sigkill: .live-run stays, as
    a SIGKILL leaves it (Ctrl-C removes it)."""
    from sparktrain.cli import main
    from sparktrain.train.folder import JobFolder

    monkeypatch.chdir(root)
    with monkeypatch.context() as m:
        ctrl_c_at_third_step(m)
        if as_sigkill:
            m.setattr(JobFolder, "discard_live", lambda self: None)
        assert main(TRAIN + ["--out", "out/j"] + knobs) == 130
    job = root / "out/j"
    assert (job / "resume.json").is_file() and (job / ".live-run").is_dir() == as_sigkill
    return job


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
