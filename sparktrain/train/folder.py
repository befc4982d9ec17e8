"""A job folder as one object, the one writer of it in a run: its lock, the inputs a run
stages, the commit of a run's files through the journal (outputs.py), its live curves,
its resume state and its failure record (docs/outputs.md "The commit journal"). Nothing
about a folder is kept process-wide: what a run holds, its JobFolder holds. The reader of
a folder's state is jobstate.py."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.core.fsutil import atomic_write_bytes, canonical_json, folder_fd, write_error
from sparktrain.core.jobfiles import (CORPUS, FAILED, LIVE_DIR, LIVE_PENDING, LOCK, RESUME_STATE,
                                      RESUME_TENSORS, STAGED, TOKENIZER)
from sparktrain.train import outputs


class JobFolder:
    """`path`, written by this object only while it holds the folder's lock (`lock`, or
    `with JobFolder(path) as folder:`); every writing method takes the lock first."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = None   # the locked .lock while this object is the writer
        self._made: Path | None = None  # the highest folder lock() made for it
        self._staging = False         # whether STAGED holds this run's new inputs

    def __repr__(self) -> str:
        return f"JobFolder({self.path.as_posix()!r}, locked={self.locked})"

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def lock(self) -> "JobFolder":
        """Become the only writer of the folder (created if absent); this object's lock is
        taken once, a second call changes nothing. Another holder: one line."""
        if self._fd is not None:
            return self
        if not os.path.lexists(self.path):  # removed whole, with the parents made for it,
            made = self.path                  # when the run fails before a commit
            while not os.path.lexists(made.parent):
                made = made.parent
            self._made = made
        try:  # the folder opened without following a link, then its lock
            with folder_fd(self.path, create=True) as dir_fd:
                fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o666, dir_fd=dir_fd)
        except OSError as err:
            raise SparkError(write_error(self.path, err)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                self._made = None  # another writer made it meanwhile: never ours to remove
                raise SparkError(f"job folder {self.path.as_posix()} is in use by another "
                                 "spark process (its .lock is held); wait for that run to "
                                 "finish") from None
            raise SparkError(f"cannot lock job folder {self.path.as_posix()}: "
                             f"{err.strerror or err}") from None
        self._fd = fd
        outputs.remove_stale_temps(self.path)
        with folder_fd(self.path) as dir_fd:  # a killed run's staged inputs: never committed
            outputs.remove_entry(dir_fd, STAGED)
        return self

    def unlock(self) -> None:
        self.drop_staged()
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None

    def __enter__(self) -> "JobFolder":
        return self.lock()

    def __exit__(self, *exc) -> None:
        self.unlock()

    # ------------------------------------------------------------ the run's new inputs

    def stage_inputs(self) -> Path:
        """An empty folder (STAGED) where this run prepares the job's new tokenizer.json
        and corpus/: they replace the job's only in the commit of its weights; a failure or
        a kill leaves the old set (docs/outputs.md "The commit journal")."""
        self.lock()
        with folder_fd(self.path) as fd:
            outputs.remove_entry(fd, STAGED)
            os.mkdir(STAGED, 0o777, dir_fd=fd)
        self._staging = True
        return self.path / STAGED

    @property
    def inputs(self) -> Path:
        """Where the run reads the job's tokenizer.json and corpus/: the staged ones when
        this run prepared them, else the folder's."""
        return self.path / STAGED if self._staging else self.path

    def drop_staged(self) -> None:
        """A failed run's staged inputs go; the job keeps the set it had."""
        if self._staging:
            self._staging = False
            with contextlib.suppress(OSError), folder_fd(self.path) as fd:
                outputs.remove_entry(fd, STAGED)

    @contextlib.contextmanager
    def writes(self):
        """A command's work on the folder: an OSError becomes one line; on a failure (not
        TrainingFailed) a folder lock() made and nothing was committed to goes whole."""
        try:
            yield self
        except BaseException as err:
            self.drop_staged()  # the job's tokenizer and corpus stay the ones its weights used
            if not isinstance(err, (OSError, SparkError)):
                raise
            if self._made is not None and not isinstance(err, TrainingFailed):
                top, self._made = self._made, None
                self.unlock()
                _remove_made(self.path, top)
            if isinstance(err, OSError):
                raise SparkError(write_error(err.filename or self.path, err)) from None
            raise

    # ------------------------------------------------------------ commits

    def recover(self) -> None:
        """Roll an interrupted commit forward (or drop one without a journal)."""
        if self.path.is_dir():
            self.lock()
            outputs.recover(self.path)

    def commit(self, files: dict[str, bytes], moved: dict[str, Path] | None = None) -> None:
        """`files` (name -> bytes) and `moved` (name -> a file or folder made inside the
        folder) at their names, all or none, whatever kills the process (the journal)."""
        self.lock()
        outputs.recover(self.path)
        outputs.commit_files(self.path, files, moved or {})
        self._made = None  # it holds committed files now: never removed whole

    def commit_run(self, files: dict[str, bytes]) -> None:
        """A finished run's set in one commit: its records, the inputs it staged and its
        curves; then its resume state and any failure record go."""
        staged = {name: self.inputs / name for name in (TOKENIZER, CORPUS)
                  if self._staging and os.path.lexists(self.inputs / name)}
        self.commit(files, {**staged, **self.live_pending()})
        self.drop_staged()
        self.clear_failure()
        self.clear_resume()
        self.discard_live()

    def live_pending(self) -> dict[str, Path]:
        """{dvclive: the run's DVCLive folder (train/live.py writes it)} for the commit that
        makes it the job's (none when the run wrote none)."""
        path = self.path / LIVE_PENDING / LIVE_DIR
        return {LIVE_DIR: path} if path.is_dir() and not path.is_symlink() else {}

    def discard_live(self) -> None:
        """The run's pending curves (.live-run/) go, whatever they are: nothing resumes them."""
        with contextlib.suppress(OSError), folder_fd(self.path) as fd:
            outputs.remove_entry(fd, LIVE_PENDING)

    def clear_resume(self) -> None:
        for name in (RESUME_STATE, RESUME_TENSORS):
            (self.path / name).unlink(missing_ok=True)

    # ------------------------------------------------------------ failure records

    def write_failure(self, info: dict) -> None:
        """failed.json: the failure's record and its UTC time (never declared to DVC)."""
        self.lock()
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        atomic_write_bytes(self.path / FAILED, canonical_json({**info, "when": when}).encode())

    def clear_failure(self) -> None:
        self.lock()
        (self.path / FAILED).unlink(missing_ok=True)


def _remove_made(folder: Path, top: Path) -> None:
    """`folder` whole, then its empty parents up to `top`, each through its parent's fd."""
    with contextlib.suppress(OSError):
        for path in (folder, *[p for p in folder.parents if top in (p, *p.parents)]):
            with folder_fd(path.parent) as fd:
                if path == folder:
                    shutil.rmtree(path.name, dir_fd=fd)
                else:
                    os.rmdir(path.name, dir_fd=fd)
