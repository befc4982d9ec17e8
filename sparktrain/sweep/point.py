"""One sweep point (or tune trial) on a Dask worker: clone the shared git remote at the
sweep's commit, `dvc exp run` in the clone, `dvc exp push` the experiment; a failure is its
one line. An optional monitor watches the run and may stop it (spark tune's pruning); a
stopped run ends as on Ctrl-C, or is killed when it does not (docs/pipeline.md)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from sparktrain.core.jobfiles import PARAMS_FILE
from sparktrain.repro.toolenv import tool_env
from sparktrain.sweep.clones import owned_folder, running_at, scratch_folder

ONE_THREAD = {"SPARK_BLAS_THREADS": "1", "SPARK_WORKERS": "1"}  # N workers use N cores
POLL_S = 2.0   # how often a monitored run's monitor looks at its clone
TERM_GRACE_S = 30.0  # a stopped run's processes get this long after SIGTERM, then SIGKILL
KILL_WAIT_S = 10.0   # and this long to be gone after SIGKILL (the kernel's part: no hang)


class Monitor(Protocol):
    """Watches a point's `dvc exp run` from the worker (picklable: it travels in the job)."""

    def poll(self, clone: Path) -> bool:
        """Called every POLL_S while the run goes on: True stops it (the point is "stopped")."""

    def result(self, clone: Path) -> dict:
        """After a run that finished: what the driver gets back (the record's "result")."""

    def cut(self, clone: Path) -> str | None:
        """After a stop: a `-S` override that makes a run end where this one was stopped
        (the point is then run again with it and pushed: its record says what ran), or
        None (nothing is pushed)."""


@dataclass(frozen=True)
class PointJob:
    git_url: str                  # the shared git remote, as the worker reaches it
    commit: str                   # the sweep's baseline commit (full sha)
    name: str                     # experiment name
    overrides: tuple[str, ...]    # `-S` arguments
    dvc_remote: str | None = None # DVC remote name (None: the repo's default)
    scratch: str | None = None    # where the clone goes (None: the worker's temp dir)
    dvc_remote_url: str | None = None  # `dvc_remote`'s URL for the clone's config.local
    monitor: Monitor | None = None     # watches the run; may stop it (spark tune's pruning)


class PointFailed(Exception):
    """str(): the one-line reason a step of the point failed."""


class PointStopped(Exception):
    """The point's monitor stopped its run and nothing is pushed: it gave no cut (or
    str(): why the run with its cut failed)."""


def run_point(job: PointJob) -> dict:
    """Clone, `dvc exp run`, `dvc exp push`; {name, state, error, seconds, host} (+ result:
    the monitor's, when it has one); state "done", "failed" or "stopped" (by the monitor;
    with "cut": the override its pushed experiment ran with, else nothing was pushed)."""
    t0 = time.perf_counter()
    record = {"name": job.name, "state": "done", "error": None, "host": os.uname().nodename}
    # a dead worker's clones go first
    with owned_folder(job.name, scratch_folder(job.scratch)) as clone:
        try:
            cut = _in_clone(job, clone)
            if cut:
                record.update(state="stopped", cut=cut)
            if job.monitor is not None:
                record["result"] = job.monitor.result(clone)
        except PointFailed as err:
            record.update(state="failed", error=str(err))
        except PointStopped as err:
            record["state"] = "stopped"
            if str(err):
                record["cut_error"] = str(err)
    record["seconds"] = round(time.perf_counter() - t0, 2)
    return record


def _in_clone(job: PointJob, clone: Path) -> str | None:
    """The point in `clone`, pushed; the monitor's cut when it stopped the run (None:
    it ran to the end)."""
    _call(["git", "clone", "-q", "--no-checkout", job.git_url, str(clone)], clone.parent,
          f"git clone {job.git_url}")
    _call(["git", "checkout", "-q", job.commit], clone,
          f"commit {job.commit[:12]} is not on the git remote {job.git_url}; push it first")
    if job.dvc_remote_url:
        _call(["dvc", "remote", "add", "--local", "-f", job.dvc_remote, job.dvc_remote_url],
              clone, "dvc remote add --local")
    remote = ["-r", job.dvc_remote] if job.dvc_remote else []
    sets = [arg for override in job.overrides for arg in ("-S", override)]
    run = ["dvc", "exp", "run", "-n", job.name, *sets]
    cut = None
    if job.monitor is None:
        _call(run, clone, "dvc exp run")
    else:
        try:
            _watched(run, clone, "dvc exp run", job.monitor)
        except PointStopped:
            cut = _run_cut(job, clone, run)
    _call(["dvc", "exp", "push", *remote, "origin", job.name], clone, "dvc exp push")
    return cut


def _run_cut(job: PointJob, clone: Path, run: list[str]) -> str:
    """After the monitor stopped `run`: the same run again in `clone`, with the monitor's
    cut (it ends where the stop came), to be pushed as the point; its cut, or
    PointStopped when there is none or that run failed (nothing is pushed)."""
    cut = job.monitor.cut(clone)
    if cut is None:
        raise PointStopped()
    # the stopped run's params.yaml goes (a `+KEY` override adds its key once); the stages
    # it finished are in dvc.lock and the clone's cache, and a state its step saved
    # (step.checkpoint_every) is resumed when it is of this run
    _call(["git", "checkout", "-q", job.commit, "--", PARAMS_FILE], clone,
          f"git checkout {PARAMS_FILE}")
    try:
        _call([*run, "-S", cut], clone, f"dvc exp run -S {cut}")
    except PointFailed as err:   # e.g. its passes did not learn: no record of them
        raise PointStopped(str(err)) from None
    if job.monitor.cut(clone) is None:   # its trial was taken from it meanwhile
        raise PointStopped()
    return cut


def _call(cmd: list[str], cwd: Path, what: str) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=tool_env(cwd, ONE_THREAD), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise PointFailed(f"{what} exited {done.returncode}: {reason(done.stdout)}")


def _watched(cmd: list[str], cwd: Path, what: str, monitor: Monitor) -> None:
    """`_call`, asking `monitor` every POLL_S whether to stop; a stop sends SIGTERM to the
    run and its stages (they end as on Ctrl-C) and raises PointStopped. The run stays in
    the worker's process group: whatever ends the cluster's processes ends it too."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=tool_env(cwd, ONE_THREAD), stdout=log,
                                stderr=subprocess.STDOUT, text=True)
        try:
            while proc.poll() is None:
                time.sleep(POLL_S)
                if proc.poll() is None and monitor.poll(cwd):
                    _terminate(proc)
                    raise PointStopped()
        finally:
            if proc.poll() is None:  # the task itself is ending (an error in the monitor)
                _terminate(proc)
        if proc.returncode != 0:
            log.seek(0)
            raise PointFailed(f"{what} exited {proc.returncode}: {reason(log.read())}")


def _terminate(proc: subprocess.Popen, grace_s: float = TERM_GRACE_S) -> None:
    """SIGTERM to the process and every process under it (stages end as on Ctrl-C), then
    wait for all of them; whatever still runs after `grace_s` gets SIGKILL, so a stop never
    hangs. All, not the root alone: `dvc exp run` dies at once on SIGTERM while its stage
    still puts back its outputs, and the next run in the clone must not start beside it."""
    try:
        under = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        under = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        for process in under:
            with contextlib.suppress(psutil.Error):
                process.send_signal(sig)
        deadline = time.monotonic() + wait_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)   # the root through Popen, which keeps its exit code
        under = running_at(under, deadline)
        if proc.returncode is not None and not under:
            return


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
