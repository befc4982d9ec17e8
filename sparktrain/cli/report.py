"""What the train commands tell a person beyond their JSON: the first line of
`spark train` (where its knobs came from), the loop's lines after it, and the
pieces of `spark status` that look at the project (its root, the knobs
params.yaml holds now, the last failure). See docs/outputs.md ("failed.json").
"""
from __future__ import annotations

from pathlib import Path

from sparktrain.core.errors import SparkError
from sparktrain.core.project import find_root
from sparktrain.params import load_params, step_record
from sparktrain.train.live import StderrLines


def knobs_line(params_path: str | None, step, cfg, heldout: str | None) -> str:
    """The first line of `spark train`: where its knobs came from and the main ones."""
    source = (f"knobs from {params_path} and flags" if params_path else
              "knobs from the defaults and flags (no --params: params.yaml is not read)")
    held = f"held-out {heldout}" if heldout else "no held-out file (--heldout)"
    return (f"spark train: {source}: lr {step.lr:g}, outer {step.outer}, inner {step.inner}, "
            f"batch_size {step.batch_size}, optimizer {step.optimizer}, seed {step.seed}, "
            f"dim {cfg.dim}, {cfg.n_layer} layers; {held}")


def lines_after(first: str | None) -> StderrLines:
    """The loop's progress lines on stderr, `first` before the first of them (so a
    bad input, refused before training starts, stays the only line); on a terminal
    the loop's bar (train/live.py)."""
    return StderrLines(first)


def project_root() -> Path:
    """The project root (a subfolder works too); outside a project, the current folder."""
    try:
        return find_root()
    except SparkError:
        return Path.cwd()


def current_step(params_file: Path) -> dict | None:
    """The step knobs params.yaml holds now, as a failure records them; None if unreadable."""
    if not params_file.is_file():
        return None
    try:
        return step_record(load_params(params_file).step)
    except SparkError:
        return None


def failure_line(state: dict) -> str:
    """`spark status --summary`'s line on the last failed run: when, its knobs, why,
    and whether params.yaml still holds them."""
    failure = state["failure"]
    when = f" at {failure['when']}" if failure.get("when") else ""
    knobs = ", ".join(f"{k} {failure[k]}" for k in ("lr", "outer", "inner") if k in failure)
    now = "" if state.get("failure_current", True) else \
        "; params.yaml differs now, the verified model above is the job's"
    return f"  last run failed{when} ({knobs}): {failure.get('reason')}{now}"
