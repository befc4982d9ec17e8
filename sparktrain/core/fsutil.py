"""Files written the reproducible way (canonical JSON, atomic replace, sha256), and
the one reader for files a user names.

Every user-named input goes through `open_input`: it must be a regular file
(checked with fstat on a non-blocking descriptor, so a FIFO never blocks) no
larger than the cap of its kind, checked before a byte is read. Caps of the
big kinds are configurable with SPARK_MAX_<KIND>_MB.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

from sparktrain.core.errors import SparkError


def canonical_json(obj) -> str:
    """Sorted keys, fixed separators, a trailing newline: same object, same bytes."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`.

    A reader (or a crash) sees either the old file or the new one, never half.
    """
    path = Path(path)
    try:
        _atomic_write(path, data)
    except OSError as err:
        code = f" ({errno.errorcode.get(err.errno, err.errno)})" if err.errno else ""
        raise SparkError(f"cannot write {os.fspath(path)}: {err.strerror or err}{code}") from None


def _atomic_write(path: Path, data: bytes) -> None:
    if path.is_dir():
        raise IsADirectoryError(21, "it is a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; honour the umask
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


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


MiB = 1 << 20
# kind -> (default cap in MiB, environment variable that overrides it, or None)
SIZE_CAPS = {
    "program": (16, None),                       # .sparkbc and .spark sources
    "dataset": (512, "SPARK_MAX_DATASET_MB"),    # JSONL, train or held-out
    "dataset row": (1, "SPARK_MAX_ROW_MB"),      # one JSONL line
    "weights file": (1024, "SPARK_MAX_WEIGHTS_MB"),
    "corpus": (256, "SPARK_MAX_CORPUS_MB"),      # all matched corpus files together
    "checkpoint": (64, None),
    "params file": (1, None),                    # params.yaml: a config file, not data
    "eval file": (64, None),
    "job file": (64, None),                      # status.json, failed.json, ... of a job
    "file": (None, None),                        # hashed in chunks, never held whole
}


def size_cap(what: str) -> int | None:
    """The largest file of kind `what` we read, in bytes (None: no cap)."""
    default, env = SIZE_CAPS.get(what, (64, None))
    value = os.environ.get(env) if env else None
    if value is not None:
        try:
            mb = float(value)
        except ValueError:
            mb = -1.0
        if not (mb > 0 and mb < 1 << 30):
            raise SparkError(f"{env}={value!r} is not a positive number of MiB")
        return int(mb * MiB)
    return None if default is None else default * MiB


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_input(path: str | os.PathLike, what: str):
    """A binary file object on `path`, checked to be a regular file within its cap.

    Opened non-blocking so a FIFO cannot hang the open; fstat decides before
    any read; the flag is cleared afterwards for ordinary reads.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SparkError(f"cannot read {name}: the {what} does not exist") from None
    except OSError as err:
        raise SparkError(f"cannot read {name}: {err.strerror or err}") from None
    try:
        _check_stat(name, os.fstat(fd), what)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | os.PathLike, what: str) -> None:
    """The checks of `open_input` without opening: exists, a regular file, within its cap."""
    name = os.fspath(path)
    try:
        st = os.stat(name)
    except FileNotFoundError:
        raise SparkError(f"{what} {name} does not exist") from None
    except OSError as err:
        raise SparkError(f"cannot read {name}: {err.strerror or err}") from None
    _check_stat(name, st, what)


def _check_stat(name: str, st: os.stat_result, what: str) -> None:
    """A regular file within the cap of its kind, or one line saying what it is."""
    if stat.S_ISDIR(st.st_mode):
        raise SparkError(f"cannot read {name}: the {what} path is a folder")
    if not stat.S_ISREG(st.st_mode):
        raise SparkError(f"cannot read {name}: the {what} is {_kind_of(st.st_mode)}, "
                         "not a regular file")
    cap = size_cap(what)
    if cap is not None and st.st_size > cap:
        raise SparkError(f"cannot read {name}: the {what} is {st.st_size:,} bytes, above "
                         f"the {cap:,}-byte limit" + _raise_hint(what))


def _raise_hint(what: str) -> str:
    env = SIZE_CAPS.get(what, (None, None))[1]
    return f" (raise it with {env})" if env else ""


def read_input(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of a file the user named; missing, a folder, a FIFO, a device,
    too big or unreadable is one line."""
    cap = size_cap(what)
    with open_input(path, what) as f:
        try:
            # a file that grows after the fstat (or a /proc file that says 0) is still bounded
            data = f.read() if cap is None else f.read(cap + 1)
        except OSError as err:
            raise SparkError(f"cannot read {os.fspath(path)}: {err.strerror or err}") from None
    if cap is not None and len(data) > cap:
        raise SparkError(f"cannot read {os.fspath(path)}: the {what} is larger than the "
                         f"{cap:,}-byte limit" + _raise_hint(what))
    return data


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, what: str = "file") -> str:
    """sha256 in 1 MiB chunks, of a regular file within the cap of its kind `what`."""
    h = hashlib.sha256()
    with open_input(path, what) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
