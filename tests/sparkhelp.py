"""Shared test helpers: run the `spark` CLI in-process or as a real process."""
from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPARK = [sys.executable, "-m", "sparktrain.cli"]

# Every subprocess a test runs has a hang guard, never a speed check: a busy
# 2-core machine runs a command several times slower than a quiet one, so each
# guard is at least 10x the command's quiet time. HANG_GUARD_S covers the
# slowest (a queued grid or the coder proof through dvc: minutes when quiet);
# PROMPT_GUARD_S a command that must refuse or answer at once (seconds when
# quiet), so a regression that hangs fails in minutes, not an hour.
HANG_GUARD_S = 3600
PROMPT_GUARD_S = 300


def compile_code(root: Path) -> None:
    """Byte-compile the project's code under `root` (the package, the stage scripts, the
    tools), so the processes that run it, and every `cp -a` copy, start from the cache."""
    for name in ("sparktrain", "stages", "tools"):
        if (root / name).is_dir():
            compileall.compile_dir(root / name, quiet=1)


def run_spark(args, cwd=None, env=None, timeout=HANG_GUARD_S):
    """`spark ARGS` as a subprocess: (returncode, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(SPARK + [str(a) for a in args], cwd=cwd, env=full_env,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def assert_one_line_error(rc, err, *needles):
    assert rc == 2, f"exit {rc}, stderr: {err}"
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one stderr line, got: {err!r}"
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"


@pytest.fixture
def project(tmp_path):
    """A scratch project root holding the committed data and programs."""
    for sub in ("data", "params.yaml"):
        src = ROOT / sub
        if src.is_dir():
            shutil.copytree(src, tmp_path / sub)
        elif src.exists():
            shutil.copy(src, tmp_path / sub)
    return tmp_path
