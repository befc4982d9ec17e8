"""Files written the reproducible way (canonical JSON, atomic replace through folder
descriptors, sha256), and the one bounded reader of files a user names (docs/outputs.md)."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
from pathlib import Path

from sparktrain.core.errors import SparkError, printable


def canonical_json(obj) -> str:
    """Sorted keys, fixed separators, a trailing newline: same object, same bytes."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """`write_at` in `path`'s folder, opened link-free by `open_folder` (made when
    missing): the old file or the new one, never half, and never through a link."""
    path = Path(path)
    try:
        with folder_fd(path.parent, create=True) as fd:
            write_at(fd, path.name, data)
    except OSError as err:
        raise SparkError(write_error(path, err)) from None


def write_error(path: str | os.PathLike, err: OSError) -> str:
    """The one line of a failed write: the path, the reason and its errno name (ENOSPC)."""
    code = f" ({errno.errorcode.get(err.errno, err.errno)})" if err.errno else ""
    return f"cannot write {printable(os.fspath(path))}: {err.strerror or err}{code}"


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class LinkInPath(OSError):
    """A component of a path being written is a symbolic link (or not a folder)."""


def open_folder(path: str | os.PathLike, create: bool = False) -> int:
    """A descriptor on the folder `path`, opened component by component with O_NOFOLLOW
    from / or the current folder: a link on the way is LinkInPath. create: make missing ones."""
    path = os.fspath(path)
    fd = os.open("/" if os.path.isabs(path) else ".", _DIR_FLAGS)
    try:
        for part in Path(path).parts[1 if os.path.isabs(path) else 0:]:  # no "." parts
            nxt = _open_component(fd, part, create)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_component(fd: int, part: str, create: bool) -> int:
    for attempt in (0, 1):
        try:
            return os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
        except FileNotFoundError:
            if not create or attempt:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            st = os.lstat(part, dir_fd=fd)
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
            raise LinkInPath(err.errno, f"{printable(part)} in its path is {what} (links "
                             "are never followed when writing; name the real path)") from None


@contextlib.contextmanager
def folder_fd(path: str | os.PathLike, create: bool = False):
    """`open_folder` as a context: the descriptor is closed on the way out."""
    fd = open_folder(path, create)
    try:
        yield fd
    finally:
        os.close(fd)


def pinned_folder(path: str | os.PathLike, create: bool = True) -> tuple[int, Path]:
    """(an `open_folder` descriptor the caller closes, `/proc/self/fd/N` naming it, or `path`
    without /proc) for a library that writes by path (DVCLive)."""
    try:
        fd = open_folder(path, create)
    except OSError as err:
        raise SparkError(write_error(path, err)) from None
    return fd, Path(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else Path(path)


def write_at(fd: int, name: str, data: bytes) -> None:
    """Atomically put `data` at `name` in the folder `fd`: a temp file beside it (new_temp:
    created O_EXCL | O_NOFOLLOW), fsync, rename; all relative to `fd`."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            raise IsADirectoryError(errno.EISDIR, "it is a folder")
    tmp, tfd = new_temp(fd, name)
    try:
        with os.fdopen(tfd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=fd)
        raise


TEMP_STEM_BYTES = 64  # a temp name's share of the output's name: 255-byte names stay legal
# The dot files our writers leave while they write: a temp file or folder (.tmp), a folder
# replaced and on its way out (.old), the commit journal's staged files (.pending)
TEMP_ENDINGS = (".tmp", ".old", ".pending")


def temp_stem(name: str, limit: int = TEMP_STEM_BYTES) -> str:
    """The start of `name` that a temp file beside it is named from: whole characters, at
    most `limit` bytes, so ".STEM.PID.<random>.tmp" fits the 255-byte limit of a file name
    whatever the output's own (legal) name."""
    kept, size = [], 0
    for ch in name:
        size += len(os.fsencode(ch))
        if size > limit:
            break
        kept.append(ch)
    return "".join(kept)


def new_temp(fd: int, name: str, suffix: str = ".tmp", folder: bool = False) -> tuple[str, int]:
    """A new temp file (with its open descriptor) or folder (descriptor -1)
    ".STEM.PID.xxxxxxxx<suffix>" beside `name` in the folder `fd`: STEM as temp_stem cuts
    it, the PID tells a later run a dead writer's (temp_pattern)."""
    for _ in range(100):
        tmp = f".{temp_stem(name)}.{os.getpid()}.{secrets.token_hex(4)}{suffix}"
        try:
            if folder:
                os.mkdir(tmp, 0o777, dir_fd=fd)  # the umask applies
                return tmp, -1
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                | os.O_CLOEXEC, 0o666, dir_fd=fd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temp name", name)


def temp_pattern(name: str | None = None) -> re.Pattern:
    """new_temp's names (.tmp and .old) beside the output `name`, or beside any output
    (None); group 1 is the writer's PID, absent in the names earlier versions wrote."""
    stem = re.escape(f".{temp_stem(name)}.") if name is not None else r"\..+\."
    return re.compile(rf"^{stem}(?:(\d+)\.)?[A-Za-z0-9_]{{8}}\.(?:tmp|old)$")


def is_temp(entry: str) -> bool:
    """A dot file of our writers (TEMP_ENDINGS): never a user's file in an output folder."""
    return entry.startswith(".") and entry.endswith(TEMP_ENDINGS)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_text(path, canonical_json(obj))


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


def kind_of(mode: int) -> str:
    """What a stat mode is, in words ("a FIFO"), for a refusal's line."""
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return word
    return "not a regular file"


def utf8_name(name: str, what: str) -> str:
    """`name` when it is UTF-8 text (the job's JSON records it), else one line."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = printable(os.fsencode(name).decode("utf-8", "backslashreplace"))[:120]
        raise SparkError(f"the {what} name {shown} is not UTF-8 (bytes the job's JSON "
                         "records cannot hold); rename it") from None
    return name


def open_input(path: str | os.PathLike, what: str):
    """A binary file object on `path`: opened non-blocking (a FIFO cannot hang it), then
    fstat says it is a regular file within its cap, named in UTF-8."""
    name = utf8_name(os.fspath(path), what)
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
    name = utf8_name(os.fspath(path), what)
    try:
        _check_stat(name, os.stat(name), what)
    except FileNotFoundError:
        raise SparkError(f"{what} {name} does not exist") from None
    except OSError as err:
        raise SparkError(f"cannot read {name}: {err.strerror or err}") from None


def _check_stat(name: str, st: os.stat_result, what: str) -> None:
    """A regular file within the cap of its kind, or one line saying what it is."""
    if stat.S_ISDIR(st.st_mode):
        raise SparkError(f"cannot read {name}: the {what} path is a folder")
    if not stat.S_ISREG(st.st_mode):
        raise SparkError(f"cannot read {name}: the {what} is {kind_of(st.st_mode)}, "
                         "not a regular file")
    cap = size_cap(what)
    if cap is not None and st.st_size > cap:
        raise SparkError(f"cannot read {name}: the {what} is {st.st_size:,} bytes, above "
                         f"the {cap:,}-byte limit" + _raise_hint(what))


def _raise_hint(what: str) -> str:
    env = SIZE_CAPS.get(what, (None, None))[1]
    return f" (raise it with {env})" if env else ""


def read_input(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of a file the user named, through `open_input`, bounded by its cap."""
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
