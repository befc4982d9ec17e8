"""Temporary folders with an owner: a point's clone (owned by the worker process that
runs the point) and a LocalCluster's Dask scratch (owned by its driver). The owner holds
an flock on the folder while it works in it. The kernel drops that lock when the owner
dies, however it dies (SIGKILL, Ctrl-C, its cluster closed under it), so a folder whose
lock can be taken is a dead owner's: whoever next makes one beside it, or a driver
closing its LocalCluster, ends the processes still working in it (an orphaned `dvc exp
run`) and removes it (docs/pipeline.md "Hostile inputs")."""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil

PREFIX = "spark-tmp-"            # a folder with its owner's lock; nothing else is touched
MAKING = "spark-making-"         # a folder being made, before its lock is taken


@contextlib.contextmanager
def owned_folder(name: str, parent: Path):
    """A new empty folder for `name` (a point's clone, Dask's scratch) in `parent`, locked
    by this process until the block ends and the folder is removed; the dead owners'
    folders there are removed first."""
    parent.mkdir(parents=True, exist_ok=True)
    remove_dead(parent)
    making = Path(tempfile.mkdtemp(prefix=f"{MAKING}{name}-", dir=parent))
    fd = os.open(making, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # renamed only once locked: a sweep never sees an unlocked live folder
        owned = parent / (PREFIX + making.name[len(MAKING):])
        os.rename(making, owned)
        try:
            yield owned
        finally:
            shutil.rmtree(owned, ignore_errors=True)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            making.rmdir()   # the lock or the rename failed


def scratch_folder(scratch: str | None) -> Path:
    """Where the clones go: `--scratch`, else the temp dir ($TMPDIR)."""
    return Path(scratch) if scratch else Path(tempfile.gettempdir())


def remove_dead(parent: Path) -> list[Path]:
    """Remove the folders in `parent` whose owner is gone (their lock is free), after
    ending whatever still runs in them; the removed ones."""
    removed = []
    for path in sorted(parent.glob(PREFIX + "*")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:   # not a folder, a link, or gone meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:   # its owner is alive
            os.close(fd)
            continue
        try:
            end_processes_in(path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


def end_processes_in(folder: Path) -> None:
    """SIGKILL every process (of this user) whose working folder or arguments lie in
    `folder`, with the processes under it: a dead worker's `dvc exp run` and its stages."""
    inside = str(folder.resolve())
    doomed = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        cwd, argv = proc.info.get("cwd") or "", proc.info.get("cmdline") or []
        if proc.pid != os.getpid() and any(
                p == inside or p.startswith(inside + os.sep) for p in (cwd, *argv)):
            with contextlib.suppress(psutil.Error):
                doomed += [proc, *proc.children(recursive=True)]
    for proc in doomed:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    running_at(doomed, time.monotonic() + 10)


def running_at(processes: list, deadline: float) -> list:
    """Those of `processes` still running at `deadline` (or sooner, once none is). A
    zombie has ended (psutil's wait_procs waits on it to the end): an orphan's is reaped
    by an init that may never do it."""
    while True:
        alive = []
        for process in processes:
            with contextlib.suppress(psutil.Error):
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)
