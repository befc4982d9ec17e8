"""Outputs that appear whole or not at all, beside the other file writers (fsutil): a
folder or a file written aside under a temp name, then swapped in; the output gate first,
and a killed writer's temps removed by the next (docs/outputs.md "Links")."""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import folder_fd, new_temp, temp_pattern, write_at, write_error


def publish_dir(files: dict[str, bytes], out: Path) -> None:
    """Write files into a fresh folder beside `out`, then swap it in; a write error (disk
    full, a name too long, a parent that is a file) is one line, the temp folder gone."""
    with _one_line(out), folder_fd(out.parent, create=True) as fd:
        remove_stale(out, fd)
        tmp, _ = new_temp(fd, out.name, folder=True)
        try:
            tfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                for name, data in sorted(files.items()):
                    write_at(tfd, name, data)
            finally:
                os.close(tfd)
            _swap_in(fd, tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True, dir_fd=fd)
            raise


def publish_file(write, out: Path) -> None:
    """`write(tmp_path)` writes the file aside; then it replaces `out`. Errors as publish_dir.
    `write` gets the temp file's name through the folder's descriptor (/proc/self/fd/N/NAME),
    so it writes into the folder opened without following a link, whatever the path becomes."""
    with _one_line(out), folder_fd(out.parent, create=True) as fd:
        remove_stale(out, fd)
        tmp, tfd = new_temp(fd, out.name)
        os.close(tfd)  # `write` opens it by name
        proc = f"/proc/self/fd/{fd}"  # a path to tmp in the folder fd that no link can redirect
        try:
            write(f"{proc}/{tmp}" if os.path.isdir(proc) else tmp)
            own = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
            try:  # the written temp file reaches the disk before it replaces anything
                os.fsync(own)
            finally:
                os.close(own)
            st = os.stat(tmp, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise SparkError(f"cannot write {os.fspath(out)}: its temp file was replaced "
                                 "while it was written")
            _swap_in(fd, tmp, out)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)
            raise


@contextlib.contextmanager
def _one_line(out: Path):
    try:
        yield
    except OSError as err:
        why = write_error(out, err) if err.errno else (  # a short write reported without errno
            f"cannot write {os.fspath(out)}: {err}: a short write (the disk is full or the "
            "file-size limit is reached)")
        raise SparkError(f"{why}; nothing was replaced") from None


def remove_stale(out: Path, fd: int) -> None:
    """Temp files and folders of earlier runs writing this OUT that were killed (their
    process is gone): only our own name pattern, only beside OUT (the folder `fd`)."""
    pattern = temp_pattern(out.name)
    for entry in os.scandir(fd):
        match = pattern.match(entry.name)
        if not match or match.group(1) is None or _alive(int(match.group(1))):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.name, ignore_errors=True, dir_fd=fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        pass
    return True


def _swap_in(fd: int, new: str, out: Path) -> None:
    """Rename the temp `new` over `out`, both in the folder `fd`; an existing folder is
    moved aside first and removed after (never followed: no link is involved)."""
    try:
        st = os.stat(out.name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    new_is_dir = stat.S_ISDIR(os.stat(new, dir_fd=fd, follow_symlinks=False).st_mode)
    if st is None or (stat.S_ISREG(st.st_mode) and not new_is_dir):
        os.rename(new, out.name, src_dir_fd=fd, dst_dir_fd=fd)
        return
    if stat.S_ISLNK(st.st_mode):
        raise SparkError(f"refusing to replace {os.fspath(out)}: it became a symbolic link "
                         "after it was checked; nothing was replaced")
    old, _ = new_temp(fd, out.name, ".old", folder=True)
    os.rename(out.name, f"{old}/x", src_dir_fd=fd, dst_dir_fd=fd)
    os.rename(new, out.name, src_dir_fd=fd, dst_dir_fd=fd)
    shutil.rmtree(old, ignore_errors=True, dir_fd=fd)
