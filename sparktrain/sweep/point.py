"""One point of a sweep, as a Dask worker runs it: clone the shared git remote, check
out the sweep's commit, `dvc exp run -n NAME -S ...`, `dvc exp push`. It returns a
small record; a failure is its one line there, never an exception."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sparktrain.repro.workspace import tool_env

ONE_THREAD = {"SPARK_BLAS_THREADS": "1", "SPARK_WORKERS": "1"}


@dataclass(frozen=True)
class PointJob:
    git_url: str                  # the shared git remote, as the worker reaches it
    commit: str                   # the sweep's baseline commit (full sha)
    name: str                     # experiment name
    overrides: tuple[str, ...]    # `-S` arguments
    dvc_remote: str | None = None # DVC remote name (None: the repo's default)
    scratch: str | None = None    # where the clone goes (None: the worker's temp dir)
    dvc_remote_url: str | None = None  # `dvc_remote`'s URL for the clone's config.local


class PointFailed(Exception):
    """str(): the one-line reason a step of the point failed."""


def run_point(job: PointJob) -> dict:
    """Clone, `dvc exp run`, `dvc exp push`; {name, state, error, seconds, host}."""
    t0 = time.perf_counter()
    record = {"name": job.name, "state": "done", "error": None, "host": os.uname().nodename}
    if job.scratch:
        Path(job.scratch).mkdir(parents=True, exist_ok=True)
    clone = Path(tempfile.mkdtemp(prefix=f"spark-{job.name}-", dir=job.scratch))
    try:
        _in_clone(job, clone)
    except PointFailed as err:
        record.update(state="failed", error=str(err))
    finally:
        shutil.rmtree(clone, ignore_errors=True)
    record["seconds"] = round(time.perf_counter() - t0, 2)
    return record


def _in_clone(job: PointJob, clone: Path) -> None:
    _call(["git", "clone", "-q", "--no-checkout", job.git_url, str(clone)], clone.parent,
          f"git clone {job.git_url}")
    _call(["git", "checkout", "-q", job.commit], clone,
          f"commit {job.commit[:12]} is not on the git remote {job.git_url}; push it first")
    if job.dvc_remote_url:
        _call(["dvc", "remote", "add", "--local", "-f", job.dvc_remote, job.dvc_remote_url],
              clone, "dvc remote add --local")
    remote = ["-r", job.dvc_remote] if job.dvc_remote else []
    sets = [arg for override in job.overrides for arg in ("-S", override)]
    _call(["dvc", "exp", "run", "-n", job.name, *sets], clone, "dvc exp run")
    _call(["dvc", "exp", "push", *remote, "origin", job.name], clone, "dvc exp push")


def _call(cmd: list[str], cwd: Path, what: str) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=tool_env(cwd, ONE_THREAD), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise PointFailed(f"{what} exited {done.returncode}: {reason(done.stdout)}")


def reason(output: str) -> str:
    """The line that says why: a stage's own error line, else dvc's or git's last error."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("stage ") and (" error: " in line or " failed: " in line):
            return line
    for prefix in ("ERROR:", "fatal:", "error:"):
        for line in reversed(lines):
            if line.startswith(prefix):
                return line
    return lines[-1] if lines else "(no output)"
