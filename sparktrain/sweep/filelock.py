"""A blocking exclusive lock on a file, for what two `spark sweep` / `spark tune` drivers
(or workers) on one machine must not do at once: create one study database, set up the
local sweep remotes, sweep away dead workers' clones. The kernel drops an flock with its
last descriptor, so a killed holder never leaves it held (docs/tuning.md "Tuning")."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


@contextlib.contextmanager
def held(path: Path):
    """Hold `path`'s lock (made when missing, with its folder) for the `with` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
