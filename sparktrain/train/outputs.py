"""A job folder's files, so a crash never leaves a mixed set: the commit journal and the
ARTIFACT text (docs/outputs.md "The commit journal"). Its writers run under the folder's
lock, which JobFolder (folder.py) holds and which only it calls them under; the reader of
a folder's state is jobstate.py."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
from pathlib import Path

from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import atomic_write_bytes, folder_fd, temp_pattern
from sparktrain.core.jobfiles import (ARTIFACT, CHECKPOINT, CORPUS, JOURNAL, LIVE_DIR, LOCK,
                                      PERF, RESUME_STATE, RESUME_TENSORS, TOKENIZER, WEIGHTS)
from sparktrain.core.safeload import load_json_file

# the only names a journal may roll forward: the set one run makes (its inputs, weights,
# records and curves, which must change together) and a run's resume pair
JOURNALLED = (ARTIFACT, CHECKPOINT, WEIGHTS, PERF, TOKENIZER, CORPUS, LIVE_DIR,
              RESUME_STATE, RESUME_TENSORS)
FOLDERS = (CORPUS, LIVE_DIR)  # journalled names that are folders
CRASH_HOOK = "SPARK_TEST_CRASH_AT"  # tests only: simulate SIGKILL mid-commit at this point


def _pending(folder: Path, name: str) -> Path:
    return folder / f".{name}.pending"


def _crash_point(where: str) -> None:
    if os.environ.get(CRASH_HOOK) == where:  # read when it matters, never at import
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def remove_stale_temps(folder: Path) -> None:
    """Temp files of our pattern a killed writer left (only the lock holder calls this)."""
    ours = temp_pattern()
    for entry in os.scandir(folder):
        if ours.match(entry.name) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def remove_entry(dir_fd: int, name: str) -> None:
    """`name` in the folder `dir_fd` (a file, a link or a whole folder), if there."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def commit_files(folder: Path, files: dict[str, bytes], moved: dict[str, Path]) -> None:
    """Put `files` (name -> bytes) and `moved` (name -> a file or folder this run made inside
    `folder`) at their names, all or none, whatever kills the process (the journal); the
    caller holds the lock and recovered the folder first (JobFolder.commit)."""
    names = sorted({*files, *moved})
    if unknown := sorted(set(names) - set(JOURNALLED)):
        raise ValueError(f"commit_files only journals {JOURNALLED}, not {unknown}")
    try:
        for name, data in files.items():
            atomic_write_bytes(_pending(folder, name), data)
        with folder_fd(folder) as fd:
            for name, path in moved.items():
                with folder_fd(path.parent) as src:
                    os.rename(path.name, _pending(folder, name).name, src_dir_fd=src,
                              dst_dir_fd=fd)
        _crash_point("before-journal")
        atomic_write_bytes(folder / JOURNAL, json.dumps(names).encode())
    except BaseException:  # no journal: the pending files go, the job's files stay
        with contextlib.suppress(OSError):
            recover(folder)
        raise
    with folder_fd(folder) as fd:  # renames relative to the folder: no link redirects one
        for i, name in enumerate(names):
            _roll_in(fd, name)
            if i == 0:
                _crash_point("mid-rename")
        os.fsync(fd)
        os.unlink(JOURNAL, dir_fd=fd)


def _roll_in(fd: int, name: str) -> None:
    """`.NAME.pending` becomes NAME in the folder `fd`; a folder there is moved aside to
    `.NAME.old` first (a folder cannot be renamed over one) and removed after. Repeatable:
    a kill anywhere in it leaves what the next call finishes."""
    pending, old = _pending(Path(), name).name, f".{name}.old"
    remove_entry(fd, old)
    try:
        st = os.stat(pending, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    # only what a writer made: a regular file, or a folder for a folder's name (never a link)
    if st is not None and (stat.S_ISDIR(st.st_mode) if name in FOLDERS
                           else stat.S_ISREG(st.st_mode)):
        if name in FOLDERS:
            with contextlib.suppress(FileNotFoundError):
                os.rename(name, old, src_dir_fd=fd, dst_dir_fd=fd)
        os.rename(pending, name, src_dir_fd=fd, dst_dir_fd=fd)
    remove_entry(fd, old)


def read_job_json(path: Path):
    """A job file's JSON, None when it is missing or unreadable (job_state says which)."""
    try:
        return load_json_file(path, "job file")
    except (SparkError, ValueError, RecursionError):
        return None


def journal_names(folder: Path) -> list[str]:
    """The job files a `.commit` names; only our fixed names count, anything else is none."""
    names = read_job_json(folder / JOURNAL) if (folder / JOURNAL).is_file() else None
    return [n for n in JOURNALLED if n in names] if isinstance(names, list) else []


def recover(folder: Path) -> None:
    """Roll an interrupted commit forward (or drop one without a journal); the caller holds
    the lock (JobFolder.recover)."""
    with folder_fd(folder) as fd:
        for name in journal_names(folder):
            _roll_in(fd, name)
        with contextlib.suppress(OSError):  # a folder that cannot sync still rolled forward
            os.fsync(fd)
        for name in (JOURNAL, *(f".{n}.{end}" for n in JOURNALLED for end in ("pending", "old"))):
            remove_entry(fd, name)


def current_file(folder: Path, name: str, journal: list[str]) -> Path:
    """Where `name` of a job reads from: its pending file while a journal names it."""
    pending = _pending(folder, name)
    return pending if name in journal and (pending.is_dir() if name in FOLDERS
                                           else pending.is_file()) else folder / name


def artifact_text(fields: list[tuple[str, object]], header: str) -> str:
    lines = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in fields]
    return "\n".join([header, *lines]) + "\n"


def dry_artifact(job) -> str:
    return artifact_text([("mode", "dry-run"), ("not_sgd", True), ("trained", False),
                          ("checkpoint", job.rel(CHECKPOINT))], f"spark-train-dry {job.id}")


def trained_artifact(job, step_n: int, device: str = "cpu", optimizer: str = "sgd") -> str:
    """The trained run's marker; `mode` is device-optimizer (`cpu-sgd`, `cuda-muon`, ...).
    The header `spark-train-sgd` and `not_sgd=false` are the original's fixed fields, the
    same for every optimizer (docs/outputs.md "ARTIFACT")."""
    return artifact_text([("mode", f"{device}-{optimizer}"), ("not_sgd", False), ("trained", True),
                          ("step_n", step_n), ("op", "step"), ("weights", job.rel(WEIGHTS)),
                          ("checkpoint", job.rel(CHECKPOINT))], f"spark-train-sgd {job.id}")


def parse_artifact(text: str) -> dict:
    lines = text.splitlines()
    return {"header": lines[0] if lines else "",
            **dict(line.split("=", 1) for line in lines[1:] if "=" in line)}


def held_elsewhere(folder: str | os.PathLike) -> bool:
    """Whether a writer holds the job's lock now (a run writing it); read only."""
    try:
        fd = os.open(Path(folder) / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: no run has locked this folder
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError as err:
        return err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)
