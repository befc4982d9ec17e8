"""Outputs appear whole or not at all: checked first, written aside, renamed into place."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from sparktrain.errors import SparkError
from sparktrain.fsutil import current_umask


def check_target(path: str | os.PathLike, force: bool, folder: bool = False) -> Path:
    """Refuse (one line) to replace something that holds data unless --force.

    folder: the output is a folder (else a file, and a folder there is refused)."""
    path = Path(path)
    if path.is_dir() and not folder:
        raise SparkError(f"{os.fspath(path)} is a folder; give a file name")
    if path.is_dir():
        if any(path.iterdir()) and not force:
            raise SparkError(f"{os.fspath(path)} exists and is not empty; "
                             "pass --force to replace it")
    elif path.exists() and not force:
        raise SparkError(f"{os.fspath(path)} exists; pass --force to replace it")
    return path


def publish_dir(files: dict[str, bytes], out: Path) -> None:
    """Write files into a fresh folder beside `out`, then swap it in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        tmp.chmod(0o777 & ~current_umask())
        for name, data in sorted(files.items()):
            (tmp / name).write_bytes(data)
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_file(write, out: Path) -> None:
    """`write(tmp_path)` writes the file aside; then it replaces `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
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
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    os.replace(out, old / "x")
    os.replace(new, out)
    shutil.rmtree(old, ignore_errors=True)
