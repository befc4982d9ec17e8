"""A stage stopped before it finished (Ctrl-C, SIGTERM, a user-facing error): put back
the outputs DVC removed before running it, and say so on the one error line.

`stages/common.py run` installs `on_sigterm` and calls `restored_note` /
`interrupted`; the restore itself is `repro.lock.restore_outputs`, confined to
the job's folder and md5-checked. See docs/pipeline.md ("When a stage fails").
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Callable

from sparktrain.errors import SparkError, printable
from sparktrain.repro.lock import restore_outputs

EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal number, as shells report it


class Terminated(BaseException):
    """SIGTERM, raised where the stage was, so its `finally` blocks run."""


def _raise_terminated(signum, frame):
    raise Terminated()


def on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _raise_terminated)


def restored_note(stage: str, folder: Callable[[], Path]) -> str:
    """"; <what the restore did>" when dvc.lock records outputs of `stage`, else "".
    `folder` gives the job folder (it reads params.yaml, which may be what broke)."""
    try:
        note = restore_outputs(stage, folder())
    except (SparkError, OSError) as err:  # a disk still full, params.yaml broken
        return (f"; the previous outputs were not restored ({err}); "
                f"`dvc checkout {stage}` brings them back")
    return "" if note.startswith("no earlier outputs") else f"; {note}"


def interrupted(stage: str, signame: str, folder: Callable[[], Path]) -> int:
    """Restore (further signals ignored meanwhile), print one line; the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    note = restored_note(stage, folder) or "; no earlier outputs recorded in dvc.lock"
    print(f"stage {stage}: interrupted by {signame}{printable(note)}", file=sys.stderr)
    return EXIT[signame]
