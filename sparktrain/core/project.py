"""The project root, found as git and DVC find theirs: the nearest folder upwards holding
`dvc.yaml` or `.dvc/` (docs/pipeline.md, "Where commands run")."""
from __future__ import annotations

import os
from pathlib import Path

from sparktrain.core.errors import SparkError

OUT = "out"
PARAMS_FILE = "params.yaml"   # the knobs, at the root beside dvc.yaml (sparktrain/params.py)


def root_of(start: str | Path | None = None, git: bool = False) -> Path | None:
    """The nearest folder at or above `start` (default: the current one) holding dvc.yaml
    or .dvc/ (or .git when `git`); None when there is none."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if ((folder / "dvc.yaml").is_file() or (folder / ".dvc").is_dir()
                or (git and os.path.lexists(folder / ".git"))):
            return folder
    return None


def find_root(start: str | Path | None = None) -> Path:
    """`root_of(start)`, or one line when there is none."""
    found = root_of(start)
    if found is not None:
        return found
    here = Path(start if start is not None else Path.cwd()).resolve()
    raise SparkError(f"not inside a Spark Train project: no dvc.yaml or .dvc/ in {here} or "
                     f"any folder above it; run this in a clone of the project")
