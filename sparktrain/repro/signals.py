"""A stage stopped by a signal: SIGTERM raised as an exception where the stage was (so its
`finally` blocks run, as for Ctrl-C), then the outputs DVC removed put back and one line
with the shell's exit code (docs/pipeline.md)."""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Callable

from sparktrain.core.errors import printable
from sparktrain.repro.dvclock import restored_note

EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal number, as shells report it


class Terminated(BaseException):
    """SIGTERM, raised where the stage was, so its `finally` blocks run."""


def _raise_terminated(signum, frame):
    raise Terminated()


def on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _raise_terminated)


def interrupted(stage: str, signame: str, folder: Callable[[], Path]) -> int:
    """Restore (further signals ignored meanwhile), print one line; the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    note = restored_note(stage, folder) or "; no earlier outputs recorded in dvc.lock"
    print(f"stage {stage}: interrupted by {signame}{printable(note)}", file=sys.stderr)
    return EXIT[signame]
