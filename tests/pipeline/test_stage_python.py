"""The stages on a bare `python`: `.venv/bin/dvc repro` with the venv not
activated re-runs each stage with the checkout's .venv/bin/python, or stops in
one line saying how (stages/__init__.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkhelp import HANG_GUARD_S, assert_one_line_error
from stages import REEXEC_ENV, project_python

from .conftest import clone, tool_env

IN_VENV = sys.prefix != sys.base_prefix


def _bare_python() -> Path | None:
    """An interpreter outside the venv that lacks some of the project's packages
    (the venv's base often has numpy, never threadpoolctl)."""
    for python in (Path(sys.base_prefix) / "bin" / "python3", Path("/usr/bin/python3")):
        if python.is_file():
            probe = subprocess.run([str(python), "-c", "import numpy, threadpoolctl, pydantic"],
                                   capture_output=True)
            if probe.returncode != 0:
                return python
    return None


BARE = _bare_python() if IN_VENV else None
pytestmark = pytest.mark.skipif(BARE is None,
                                reason="needs a venv and a python without its packages")


def bare_env(repo: Path, tmp_path: Path) -> dict:
    """PATH whose `python3` is the base interpreter, without the project's packages, and
    with no `python` (as on Debian, Ubuntu and macOS outside a venv) when /usr/bin has
    none."""
    bindir = tmp_path / "bare-bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "python3").symlink_to(BARE)
    env = tool_env(repo)
    env["PATH"] = os.pathsep.join([str(bindir), "/usr/bin", "/bin"])
    env.pop(REEXEC_ENV, None)
    return env


def stage(repo: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["python3", "-m", "stages.check_params"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_without_a_venv_the_stage_stops_in_one_line(template_copy, tmp_path):
    done = stage(template_copy, bare_env(template_copy, tmp_path))
    assert_one_line_error(done.returncode, done.stderr, "lacks the project's dependencies",
                          "make setup")


def test_with_the_checkouts_venv_the_stage_reruns_on_it(template_copy, tmp_path):
    (template_copy / ".venv").symlink_to(sys.prefix)
    done = stage(template_copy, bare_env(template_copy, tmp_path))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_a_rerun_that_still_lacks_them_does_not_loop(template_copy, tmp_path):
    (template_copy / ".venv").symlink_to(sys.prefix)
    env = bare_env(template_copy, tmp_path) | {REEXEC_ENV: "1"}
    done = stage(template_copy, env)
    assert_one_line_error(done.returncode, done.stderr, "lacks the project's dependencies")


def test_a_queued_experiments_workspace_finds_the_repositorys_venv(tmp_path):
    repo = tmp_path / "repo"
    workspace = repo / ".dvc" / "tmp" / "exps" / "standalone" / "tmp1234"
    python = repo / ".venv" / "bin" / "python"
    for folder in (workspace, python.parent):
        folder.mkdir(parents=True)
    python.touch()
    assert project_python(workspace) == python
    assert project_python(tmp_path / "elsewhere" / "repo") is None


@pytest.mark.e2e
def test_venv_dvc_repro_without_activating_runs_the_stage(template_repo, tmp_path):
    repo = clone(template_repo, tmp_path / "repo")
    (repo / ".venv").symlink_to(sys.prefix)
    dvc = Path(sys.prefix) / "bin" / "dvc"
    env = bare_env(repo, tmp_path)
    done = subprocess.run([str(dvc), "repro", "check-params"], cwd=repo,
                          env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    # `dvc exp run` the same way: every stage, each started on the bare python3
    done = subprocess.run([str(dvc), "exp", "run", "-S", "step.lr=0.05"], cwd=repo,
                          env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "Running stage 'step'" in done.stdout and "Ran experiment(s)" in done.stdout
