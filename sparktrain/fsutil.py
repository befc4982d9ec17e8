"""Files written the reproducible way: canonical JSON, atomic replace, sha256."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from sparktrain.errors import SparkError


def canonical_json(obj) -> str:
    """Sorted keys, fixed separators, a trailing newline: same object, same bytes."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`.

    A reader (or a crash) sees either the old file or the new one, never half.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_text(path, canonical_json(obj))


def read_input(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of a file the user named; missing, a folder or unreadable is one line."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise SparkError(f"cannot read {os.fspath(path)}: the {what} does not exist") from None
    except IsADirectoryError:
        raise SparkError(f"cannot read {os.fspath(path)}: the {what} path is a folder") from None
    except OSError as err:
        raise SparkError(f"cannot read {os.fspath(path)}: {err.strerror or err}") from None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
