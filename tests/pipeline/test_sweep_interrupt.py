"""Ctrl-C of `spark sweep` (the terminal's SIGINT to its whole process group) at two
moments, in a fresh clone with its own $TMPDIR: once a worker has made its clone, and
once a point's `dvc exp run` trains. Either way the sweep says `spark: interrupted`
(exit 130) and leaves $TMPDIR as it was: no clone, no process of its session, no queue
entry (docs/pipeline.md "Hostile inputs")."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from sparkhelp import HANG_GUARD_S

from .conftest import clone, dvc, tool_env

pytestmark = pytest.mark.e2e


def _session(sid: int) -> list[psutil.Process]:
    """The live processes of session `sid` (a zombie has ended: only its parent's wait,
    or a container's init that never waits, keeps its entry)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _described(procs: list[psutil.Process]) -> list[str]:
    lines = []
    for proc in procs:
        try:
            lines.append(f"{proc.pid} ({proc.name()}, parent {proc.ppid()}) {proc.status()} "
                         f"{' '.join(proc.cmdline())[:200]}")
        except psutil.Error:
            continue
    return lines


def _moment_came(moment: str, tmp: os.PathLike, sid: int) -> bool:
    if moment == "cloned":
        return any(p.name.startswith("spark-tmp-") and not p.name.startswith("spark-tmp-dask-")
                   for p in os.scandir(tmp))
    for proc in _session(sid):
        try:
            if "stages.step" in " ".join(proc.cmdline()):
                return True
        except psutil.Error:
            continue
    return False


@pytest.mark.parametrize("moment", ["cloned", "training"])
def test_ctrl_c_of_a_sweep_leaves_tmpdir_as_it_was(template_repo, tmp_path, moment):
    repo = clone(template_repo, tmp_path / "repo")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**tool_env(repo), "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "sparktrain.cli", "sweep",
                             "-S", "step.lr=0.05,0.1", "--workers", "2"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + HANG_GUARD_S
    try:
        while not _moment_came(moment, tmp, proc.pid):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, f"never {moment}"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)   # what Ctrl-C in its terminal sends
        out, _ = proc.communicate(timeout=600)
        ended = time.monotonic() + 30   # a process the exit signalled may still be ending
        while _session(proc.pid) and time.monotonic() < ended:
            time.sleep(0.5)
    finally:
        left = _described(_session(proc.pid))
        for straggler in _session(proc.pid):
            straggler.kill()
    assert proc.returncode == 130 and out.rstrip().endswith("spark: interrupted"), out
    assert "Traceback" not in out, out
    assert left == [], left
    assert sorted(os.listdir(tmp)) == [], out
    status = dvc(repo, "queue", "status").stdout
    assert "Queued" not in status and "Running" not in status, status
