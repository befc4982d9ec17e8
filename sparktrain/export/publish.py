"""Outputs appear whole or not at all: checked first, written aside, renamed into place."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from pathlib import Path

from sparktrain.errors import SparkError
from sparktrain.fsutil import current_umask
from sparktrain.jobfiles import ARTIFACT, CHECKPOINT


# A folder holding one of these is a job folder: its files are committed together
JOB_MARKERS = (CHECKPOINT, ARTIFACT)
# The project's own tree: never an output, never inside one
SOURCE_PARTS = ("sparktrain", "stages", "tests", "docs", "tools", "data", ".git", ".dvc")
WALK_LIMIT = 100_000  # entries looked at under an existing OUT before giving up (and refusing)


def check_target(path: str | os.PathLike, force: bool, folder: bool = False,
                 inputs: tuple = ()) -> Path:
    """Refuse (one line) to replace something that holds data unless --force, and
    always an OUT that is, contains or sits inside a job folder, the project's
    source tree, or one of `inputs` (the files being read).

    folder: the output is a folder (else a file, and a folder there is refused)."""
    path = Path(path)
    try:
        return _check_target(path, force, folder, inputs)
    except OSError as err:  # a name too long, a parent that is a file, a loop of links
        raise SparkError(f"cannot write {os.fspath(path)}: {err.strerror or err}") from None


def _check_target(path: Path, force: bool, folder: bool, inputs: tuple) -> Path:
    if path.is_dir() and not folder:
        raise SparkError(f"{os.fspath(path)} is a folder; give a file name")
    if path.is_dir():
        if any(path.iterdir()) and not force:
            raise SparkError(f"{os.fspath(path)} exists and is not empty; "
                             "pass --force to replace it")
    elif path.exists() and not force:
        raise SparkError(f"{os.fspath(path)} exists; pass --force to replace it")
    check_not_ours(path, inputs)
    return path


def publish_dir(files: dict[str, bytes], out: Path) -> None:
    """Write files into a fresh folder beside `out`, then swap it in; a write error (disk
    full, a name too long, a parent that is a file) is one line, the temp folder gone."""
    with _one_line(out):
        _publish_dir(files, out)


def publish_file(write, out: Path) -> None:
    """`write(tmp_path)` writes the file aside; then it replaces `out`. Errors as publish_dir."""
    with _one_line(out):
        _publish_file(write, out)


@contextlib.contextmanager
def _one_line(out: Path):
    try:
        yield
    except OSError as err:
        if err.errno:
            why = f"{err.strerror or err} ({errno.errorcode.get(err.errno, err.errno)})"
        else:  # a writer that reports a short write without an errno
            why = f"{err}: a short write (the disk is full or the file-size limit is reached)"
        raise SparkError(f"cannot write {os.fspath(out)}: {why}; nothing was replaced") from None


def _publish_dir(files: dict[str, bytes], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    tmp = Path(tempfile.mkdtemp(prefix=_prefix(out), suffix=".tmp", dir=out.parent))
    try:
        tmp.chmod(0o777 & ~current_umask())
        for name, data in sorted(files.items()):
            (tmp / name).write_bytes(data)
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _prefix(out: Path) -> str:
    """Temp names beside OUT: ".OUT.PID.", so a later run can tell a dead writer's."""
    return f".{out.name}.{os.getpid()}."


def remove_stale(out: Path) -> list[str]:
    """Temp files and folders of earlier runs writing this OUT that were killed (their
    process is gone): only our own name pattern, only beside OUT."""
    pattern = re.compile(re.escape(f".{out.name}.") + r"(\d+)\.[A-Za-z0-9_]+\.(tmp|old)$")
    removed = []
    for entry in os.scandir(out.parent):
        match = pattern.match(entry.name)
        if not match or _alive(int(match.group(1))):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            Path(entry.path).unlink(missing_ok=True)
        removed.append(entry.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _publish_file(write, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(out), suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~current_umask())
        _swap_in(Path(tmp), out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _swap_in(new: Path, out: Path) -> None:
    if (not out.exists() or (out.is_file() and new.is_file())
            or (out.is_dir() and new.is_dir() and not any(out.iterdir()))):
        os.replace(new, out)
        return
    old = Path(tempfile.mkdtemp(prefix=_prefix(out), suffix=".old", dir=out.parent))
    os.replace(out, old / "x")
    os.replace(new, out)
    shutil.rmtree(old, ignore_errors=True)


def _project_roots() -> list[Path]:
    """This package's checkout (when it is one) and the project in the current folder."""
    roots = []
    package_root = Path(__file__).resolve().parents[2]
    if (package_root / "pyproject.toml").is_file():
        roots.append(package_root)
    here = Path.cwd().resolve()
    if (here / "dvc.yaml").is_file() and here not in roots:
        roots.append(here)
    return roots


def check_not_ours(out: Path, inputs: tuple = ()) -> None:
    """One line when writing `out` (replacing it with --force) would destroy a job's
    files, the project's sources or an input of this very command."""
    try:
        target = out.resolve()
    except (OSError, RuntimeError) as err:
        raise SparkError(f"cannot use {os.fspath(out)} as the output: {err}") from None
    name = os.fspath(out)
    for root in _project_roots():
        if target == root or target in root.parents:
            raise SparkError(f"{name} is (or holds) the project folder {root}; "
                             "write the export under out/")
        for part in SOURCE_PARTS:
            src = root / part
            if target == src or src in target.parents:
                raise SparkError(f"{name} is inside the project's {part}/ folder; "
                                 "write the export under out/")
    for parent in target.parents:
        if _is_job_folder(parent):
            raise SparkError(f"{name} is inside the job folder {parent}; its weights, "
                             "checkpoint and ARTIFACT belong together: write elsewhere")
    for item in inputs:
        if item is None:
            continue
        source = Path(item).resolve()
        if source == target or target in source.parents or (
                source.is_dir() and source in target.parents and target.exists()):
            raise SparkError(f"{name} would replace {os.fspath(item)}, which this command "
                             "reads; write elsewhere")
    if target.is_dir():
        seen = 0
        for dirpath, dirnames, filenames in os.walk(target):
            seen += len(dirnames) + len(filenames)
            if _is_job_folder(Path(dirpath), filenames):
                raise SparkError(f"{name} holds the job folder {dirpath}; replacing it would "
                                 "delete that job's files: write elsewhere")
            if seen > WALK_LIMIT:
                raise SparkError(f"{name} holds over {WALK_LIMIT:,} files; not replacing it")


def _is_job_folder(folder: Path, names=None) -> bool:
    if names is not None:
        return any(m in names for m in JOB_MARKERS)
    return any((folder / m).is_file() for m in JOB_MARKERS)
