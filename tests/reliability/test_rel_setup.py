"""Round six, the Makefile: `make setup` repairs a .venv that does not work (its python
missing, dangling, a folder, or without the project) instead of answering "Nothing to be
done", the advice every stage gives; a .venv that is a link to another checkout's venv is
refused before anything is installed into it (items 8, 11); `make run` refuses a link in
out/ before DVC deletes the outputs at its target (item 2)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from sparkhelp import ROOT

# a sub-make under `make test` must not inherit the outer make's flags
ENV = {k: v for k, v in os.environ.items()
       if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}


def _checkout(tmp_path):
    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _make(root, *args):
    # PLOTS_PAGE=: the plots template (tools/plots_page.py, npm) is no part of these checks
    return subprocess.run(["make", "--no-print-directory", *args, "PLOTS_PAGE="], cwd=root,
                          env=ENV,
                          capture_output=True, text=True, timeout=120)


def _script(py, flags=""):
    """`py` as a script running this interpreter (with `flags`)."""
    py.write_text(f'#!/bin/sh\nexec "{sys.executable}" {flags} "$@"\n')
    py.chmod(0o755)


BROKEN = {
    "python missing": lambda py: None,
    "python dangling": lambda py: py.symlink_to(py.parent / "gone"),
    "python a folder": lambda py: py.mkdir(),
    # -I -S: no site-packages, so neither the project nor numpy imports
    "python without the project": lambda py: _script(py, "-I -S"),
}


@pytest.mark.parametrize("how", BROKEN)
def test_make_setup_repairs_a_venv_that_does_not_work(tmp_path, how):
    root = _checkout(tmp_path)
    python = root / ".venv/bin/python"
    python.parent.mkdir(parents=True)
    BROKEN[how](python)
    (root / ".venv/.installed-stamp").touch()  # newer than the lock: "up to date" by time
    done = _make(root, "-n", "setup")
    assert "Nothing to be done" not in done.stdout + done.stderr, done.stdout
    assert "pip install" in done.stdout, done.stdout


def test_make_setup_keeps_a_venv_that_works(tmp_path):
    root = _checkout(tmp_path)
    (root / ".venv/bin").mkdir(parents=True)
    _script(root / ".venv/bin/python")  # the project's own python
    (root / ".venv/.installed-stamp").touch()
    done = _make(root, "-n", "setup")
    assert "Nothing to be done" in done.stdout + done.stderr, done.stdout + done.stderr


def test_make_setup_refuses_a_venv_that_is_a_link(tmp_path):
    other = tmp_path / "other/.venv"
    (other / "bin").mkdir(parents=True)
    (tmp_path / "here").mkdir()
    root = _checkout(tmp_path / "here")
    (root / ".venv").symlink_to(other)
    before = sorted(p.name for p in other.rglob("*"))
    done = _make(root, "setup", "PYTHON=false")  # nothing could be installed anyway
    assert done.returncode == 2 and ".venv is a link" in done.stderr, done.stderr
    assert sorted(p.name for p in other.rglob("*")) == before


@pytest.mark.parametrize("link", ["out", "out/train", "out/train/j"])
def test_make_run_refuses_a_link_in_out_before_dvc_runs(tmp_path, link):
    (tmp_path / "here").mkdir()
    root = _checkout(tmp_path / "here")
    target = tmp_path / "elsewhere"
    (target / "j").mkdir(parents=True)
    (target / "j/program.json").write_text("keep")
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    (root / link).symlink_to(target if link != "out/train/j" else target / "j")
    done = _make(root, "run", "STAMP=")  # no venv: only the check may run
    assert done.returncode == 2 and "is a link; DVC would delete" in done.stderr, done.stderr
    assert (target / "j/program.json").read_text() == "keep"
