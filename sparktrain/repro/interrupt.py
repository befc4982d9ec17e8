"""A stage stopped before it finished (Ctrl-C, SIGTERM, an error): put back the outputs DVC
removed (`lock.restore_outputs`) and say so on the one line (docs/pipeline.md)."""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Callable

from sparktrain.core.errors import SparkError, printable
from sparktrain.repro.lock import outputs, read_lock, restore_outputs

EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal number, as shells report it


class Terminated(BaseException):
    """SIGTERM, raised where the stage was, so its `finally` blocks run."""


def _raise_terminated(signum, frame):
    raise Terminated()


def on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _raise_terminated)


def restored_note(stage: str, folder: Callable[[], Path]) -> str:
    """"; <what the restore did>" when dvc.lock records outputs of `stage`, else "";
    `folder()` gives the job folder (it reads params.yaml, which may be what broke)."""
    try:
        where = folder()
    except SparkError:  # params.yaml is what broke: the error line already says how
        return (f"; `dvc checkout {stage}` brings back its previous outputs once params.yaml "
                f"is fixed" if any(o.stage == stage for o in outputs(read_lock()).values())
                else "")
    try:
        note = restore_outputs(stage, where)
    except (SparkError, OSError) as err:  # a disk still full
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
