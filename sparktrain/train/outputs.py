"""A job folder's files, so a crash never leaves a mixed set: the commit journal, the one-writer
lock, the ARTIFACT and failure records (docs/outputs.md "The commit journal"). The reader
of a folder's state is jobstate.py."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.core.fsutil import (atomic_write_bytes, canonical_json, folder_fd, temp_pattern,
                                    write_error)
from sparktrain.core.jobfiles import (ARTIFACT, CHECKPOINT, CORPUS, FAILED, JOURNAL, LIVE_DIR,
                                      LOCK, PERF, RESUME_STATE, RESUME_TENSORS, STAGED,
                                      TOKENIZER, WEIGHTS)
from sparktrain.core.safeload import load_json_file

# the only names a journal may roll forward: the set one run makes (its inputs, weights,
# records and curves, which must change together) and a run's resume pair
JOURNALLED = (ARTIFACT, CHECKPOINT, WEIGHTS, PERF, TOKENIZER, CORPUS, LIVE_DIR,
              RESUME_STATE, RESUME_TENSORS)
FOLDERS = (CORPUS, LIVE_DIR)  # journalled names that are folders
CRASH_HOOK = "SPARK_TEST_CRASH_AT"  # tests only: simulate SIGKILL mid-commit at this point
_held: dict[str, int] = {}  # resolved folder -> fd of its locked .lock, for this process
_created: dict[str, Path] = {}  # folder lock_job made -> the highest folder it made for it
_staging: set[str] = set()  # resolved folders whose STAGED inputs this process prepares


def _pending(folder: Path, name: str) -> Path:
    return folder / f".{name}.pending"


def _crash_point(where: str) -> None:
    if os.environ.get(CRASH_HOOK) == where:  # read when it matters, never at import
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def lock_job(folder: str | os.PathLike) -> None:
    """Become the only writer of `folder` (created) until exit or unlock_job; re-entrant."""
    folder = Path(folder)
    key = _key(folder)
    if key in _held:
        return
    if not os.path.lexists(folder):  # removed whole (with the parents made for it) on failure
        top = folder
        while not os.path.lexists(top.parent):
            top = top.parent
        _created[key] = top
    try:  # the folder opened without following a link, then its lock
        with folder_fd(folder, create=True) as dir_fd:
            fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                         dir_fd=dir_fd)
    except OSError as err:
        raise SparkError(write_error(folder, err)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise SparkError(f"job folder {folder.as_posix()} is in use by another spark process "
                             "(its .lock is held); wait for that run to finish") from None
        raise SparkError(f"cannot lock job folder {folder.as_posix()}: "
                         f"{err.strerror or err}") from None
    _held[key] = fd
    remove_stale_temps(folder)
    with folder_fd(folder) as dir_fd:  # a killed run's staged inputs: never committed
        _remove_entry(dir_fd, STAGED)


def remove_stale_temps(folder: Path) -> None:
    """Temp files of our pattern a killed writer left (only the lock holder calls this)."""
    ours = temp_pattern()
    for entry in os.scandir(folder):
        if ours.match(entry.name) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def _remove_entry(dir_fd: int, name: str) -> None:
    """`name` in the folder `dir_fd` (a file, a link or a whole folder), if there."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def stage_inputs(folder: str | os.PathLike) -> Path:
    """An empty folder (STAGED, in `folder`) where this run prepares the job's new
    tokenizer.json and corpus/: they replace the job's only in the commit of its weights
    (docs/outputs.md "The commit journal"); a failure or a kill leaves the old set."""
    folder = Path(folder)
    lock_job(folder)
    with folder_fd(folder) as fd:
        _remove_entry(fd, STAGED)
        os.mkdir(STAGED, 0o777, dir_fd=fd)
    _staging.add(_key(folder))
    return folder / STAGED


def inputs_dir(folder: str | os.PathLike) -> Path:
    """Where a run reads the job's tokenizer.json and corpus/ from: the folder this process
    staged them in, else the job folder."""
    folder = Path(folder)
    return folder / STAGED if _key(folder) in _staging else folder


def staged_inputs(folder: str | os.PathLike) -> dict[str, Path]:
    """The staged inputs a commit of `folder`'s weights moves in (none when not staging)."""
    stage = inputs_dir(folder)
    if stage == Path(folder):
        return {}
    return {name: stage / name for name in (TOKENIZER, CORPUS) if os.path.lexists(stage / name)}


def drop_staged(folder: str | os.PathLike) -> None:
    """A failed run's staged inputs go; the job keeps the set it had."""
    folder = Path(folder)
    if _key(folder) in _staging:
        _staging.discard(_key(folder))
        with contextlib.suppress(OSError), folder_fd(folder) as fd:
            _remove_entry(fd, STAGED)


def unlock_job(folder: str | os.PathLike) -> None:
    drop_staged(folder)
    fd = _held.pop(_key(Path(folder)), None)
    if fd is not None:
        os.close(fd)  # closing the last descriptor releases the flock


@contextlib.contextmanager
def job_writes(folder: str | os.PathLike):
    """A command's work on `folder`: an OSError becomes one line; on a failure (not
    TrainingFailed) a folder it made and committed nothing to goes whole (docs/outputs.md)."""
    try:
        yield
    except BaseException as err:
        drop_staged(folder)  # the job's tokenizer and corpus stay the ones its weights used
        if not isinstance(err, (OSError, SparkError)):
            raise
        top = None if isinstance(err, TrainingFailed) else _created.pop(_key(Path(folder)), None)
        if top is not None:
            unlock_job(folder)
            _remove_made(Path(folder), top)
        if isinstance(err, OSError):
            raise SparkError(write_error(err.filename or folder, err)) from None
        raise


def _remove_made(folder: Path, top: Path) -> None:
    """`folder` whole, then its empty parents up to `top`, each through its parent's fd."""
    with contextlib.suppress(OSError):
        for path in (folder, *[p for p in folder.parents if top in (p, *p.parents)]):
            with folder_fd(path.parent) as fd:
                if path == folder:
                    shutil.rmtree(path.name, dir_fd=fd)
                else:
                    os.rmdir(path.name, dir_fd=fd)


def holds_lock(folder: str | os.PathLike) -> bool:
    return _key(Path(folder)) in _held


def _key(folder: Path) -> str:
    return os.path.realpath(folder)


def commit_files(folder: str | os.PathLike, files: dict[str, bytes],
                 moved: dict[str, Path] | None = None) -> None:
    """Put `files` (name -> bytes) and `moved` (name -> a file or folder this run made inside
    `folder`) at their names, all or none, whatever kills the process (the journal)."""
    folder = Path(folder)
    moved = moved or {}
    names = sorted({*files, *moved})
    if unknown := sorted(set(names) - set(JOURNALLED)):
        raise ValueError(f"commit_files only journals {JOURNALLED}, not {unknown}")
    lock_job(folder)
    recover(folder)
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
    _created.pop(_key(folder), None)  # it holds committed files now: never removed whole


def _roll_in(fd: int, name: str) -> None:
    """`.NAME.pending` becomes NAME in the folder `fd`; a folder there is moved aside to
    `.NAME.old` first (a folder cannot be renamed over one) and removed after. Repeatable:
    a kill anywhere in it leaves what the next call finishes."""
    pending, old = _pending(Path(), name).name, f".{name}.old"
    _remove_entry(fd, old)
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
    _remove_entry(fd, old)


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


def recover(folder: str | os.PathLike) -> None:
    """Roll an interrupted commit forward (or drop one without a journal), lock taken first."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    lock_job(folder)
    with folder_fd(folder) as fd:
        for name in journal_names(folder):
            _roll_in(fd, name)
        with contextlib.suppress(OSError):  # a folder that cannot sync still rolled forward
            os.fsync(fd)
        for name in (JOURNAL, *(f".{n}.{end}" for n in JOURNALLED for end in ("pending", "old"))):
            _remove_entry(fd, name)


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
    """Whether another process holds the job's lock now (a run writing it); read only."""
    if _key(Path(folder)) in _held:
        return False
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


def write_failure(folder: Path, info: dict) -> None:
    """failed.json: the failure's record and its UTC time (never declared to DVC)."""
    lock_job(folder)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    atomic_write_bytes(Path(folder) / FAILED, canonical_json({**info, "when": when}).encode())


def clear_failure(folder: Path) -> None:
    lock_job(folder)
    (Path(folder) / FAILED).unlink(missing_ok=True)
