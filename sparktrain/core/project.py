"""The project root, found as git and DVC find theirs: the nearest folder, from
the current one upwards, that holds `dvc.yaml` or `.dvc/`. Commands that read or
write project files (`spark status`, `spark compare`, `spark sweep`) work from
any subfolder and put what they write under the root's `out/`. See
docs/pipeline.md ("Where commands run").
"""
from __future__ import annotations

import os
from pathlib import Path

from sparktrain.core.errors import SparkError

OUT = "out"
PARAMS_FILE = "params.yaml"   # the knobs, at the root beside dvc.yaml (sparktrain/params.py reads it)


def root_of(start: str | Path | None = None, git: bool = False) -> Path | None:
    """The nearest folder at or above `start` (default: the current one, resolved)
    holding dvc.yaml or .dvc/ (or .git, a folder or a submodule's file, when `git`);
    None when there is none. The one search for a project root: find_root and the
    output gate (core/gate.py) both use it."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if ((folder / "dvc.yaml").is_file() or (folder / ".dvc").is_dir()
                or (git and os.path.lexists(folder / ".git"))):
            return folder
    return None


def find_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above `start` (default: the current one) holding
    dvc.yaml or .dvc/; one line when there is none."""
    found = root_of(start)
    if found is not None:
        return found
    here = Path(start if start is not None else Path.cwd()).resolve()
    raise SparkError(f"not inside a Spark Train project: no dvc.yaml or .dvc/ in {here} or "
                     f"any folder above it; run this in a clone of the project")


def out_path(name: str, start: str | Path | None = None) -> Path:
    """`out/<name>` under the project root."""
    return find_root(start) / OUT / name
