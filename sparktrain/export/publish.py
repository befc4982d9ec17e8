"""Outputs appear whole or not at all: checked first, written aside, renamed into place."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from pathlib import Path

from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import current_umask
from sparktrain.core.gate import check_output


def check_target(path: str | os.PathLike, force: bool, kind: str, inputs: tuple = ()) -> Path:
    """The output gate (sparktrain/core/gate.py: a new path, or a `kind` output this tool
    wrote, never a device, link, tracked file or one of `inputs`), then: something
    that holds data is replaced only with --force."""
    path = Path(path)
    if not force and not path.is_symlink():  # what holds data needs --force, then the gate
        if path.is_dir() and kind in ("hf", "job"):
            if any(path.iterdir()):
                raise SparkError(f"{os.fspath(path)} exists and is not empty; "
                                 "pass --force to replace it")
        elif path.is_file():
            raise SparkError(f"{os.fspath(path)} exists; pass --force to replace it")
    return check_output(path, kind, inputs)


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
