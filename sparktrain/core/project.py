"""The project root, found as git and DVC find theirs: the nearest folder, from
the current one upwards, that holds `dvc.yaml` or `.dvc/`. Commands that read or
write project files (`spark status`, `spark compare`, `spark sweep`) work from
any subfolder and put what they write under the root's `out/`. See
docs/pipeline.md ("Where commands run").
"""
from __future__ import annotations

from pathlib import Path

from sparktrain.core.errors import SparkError

OUT = "out"
PARAMS_FILE = "params.yaml"   # the knobs, at the root beside dvc.yaml (sparktrain/params.py reads it)


def find_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above `start` (default: the current one) holding
    dvc.yaml or .dvc/; one line when there is none."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "dvc.yaml").is_file() or (folder / ".dvc").is_dir():
            return folder
    raise SparkError(f"not inside a Spark Train project: no dvc.yaml or .dvc/ in {here} or "
                     f"any folder above it; run this in a clone of the project")


def out_path(name: str, start: str | Path | None = None) -> Path:
    """`out/<name>` under the project root."""
    return find_root(start) / OUT / name
