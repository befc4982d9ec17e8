"""What every stage script shares: the whole params.yaml, checked, and `run`, which turns
what a stage raised or the signal that stopped it into one line and an exit code, with the
outputs DVC removed put back. It imports no data, model or training code, so a stage's
deps are what its own script imports (docs/pipeline.md, "Deps").
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Callable

from sparktrain.core.errors import SparkError, TrainingFailed, first_line, printable
from sparktrain.core.fsutil import write_error
from sparktrain.core.jobfiles import job_dir
from sparktrain.params import PARAMS_FILE, Params, load_params
from sparktrain.repro.dvclock import restored_note
from sparktrain.repro.signals import Terminated, interrupted, on_sigterm


def params() -> Params:
    """The whole params.yaml, validated: a typo anywhere stops every stage."""
    return load_params(PARAMS_FILE)


def run(name: str, stage: Callable[[], object]) -> int:
    """Run one stage: exit 0 with the path written, 1 when training failed or the stage
    met a bug (one line naming where, outputs restored), 2 with one line for a user
    mistake or a write the OS refused (a full disk, ...), 130/143 on SIGINT/SIGTERM
    (outputs restored)."""
    on_sigterm()
    try:
        path = stage()
    except TrainingFailed as err:
        print(f"stage {name}: training failed: {printable(str(err))}", file=sys.stderr)
        return 1
    except (SparkError, OSError) as err:  # DVC removed the outputs before the run: put them back
        line = write_error(err.filename or "a stage output", err) if isinstance(err, OSError) \
            else str(err)  # a full, read-only or failing disk, a denied write: one line too
        note = restored_note(name, lambda: job_dir(params().job))
        print(f"stage {name}: error: {printable(line + note)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted(name, "SIGINT", lambda: job_dir(params().job))
    except Terminated:
        return interrupted(name, "SIGTERM", lambda: job_dir(params().job))
    except Exception as err:  # a bug: the outputs DVC removed come back all the same
        note = restored_note(name, lambda: job_dir(params().job))
        print(f"stage {name}: internal error: {bug_line(err)}{printable(note)}",
              file=sys.stderr)
        return 1
    if path is not None:
        print(f"stage {name}: wrote {Path(path).as_posix()}", file=sys.stderr)
    return 0


def bug_line(err: Exception) -> str:
    """An unexpected exception in one line: its type, its words and the line that raised it."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {first_line(err)}{where}; this is a bug, please report it"
