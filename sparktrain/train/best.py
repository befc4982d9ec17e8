"""step.keep_best: the run commits the weights of its outer pass with the lowest held-out
loss, not its last pass's (nanoGPT's `always_save_checkpoint = False`, the HF Trainer's
`load_best_model_at_end`), while its loss curve keeps every pass (docs/training.md
"Keeping the best held-out weights")."""
from __future__ import annotations

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.data.base import TrainingData
from sparktrain.params import StepConfig
from sparktrain.train.state import Run


def check_measured(step: StepConfig, data: TrainingData) -> None:
    """keep_best chooses by the held-out loss measured after each pass: refused without one."""
    if step.keep_best and data.heldout_set is None:
        raise SparkError("step.keep_best keeps the pass with the lowest held-out loss, but this "
                         "run measures none (pairs without a held-out file); give one "
                         "(eval.data, --heldout) or leave keep_best off")


def best_pass(curve: list[dict]) -> int:
    """The outer pass (1, 2, ...) with the curve's lowest held-out loss, the first of equals."""
    return min(curve[1:], key=lambda point: point["heldout_loss"])["outer"]


def keep_if_best(run: Run, curve: list[dict]) -> None:
    """After the curve's last pass: a host copy of the weights when that pass is the best."""
    if run.step.keep_best and best_pass(curve) == curve[-1]["outer"]:
        run.best = {n: np.array(a, copy=True) for n, a in run.host_params().items()}


def restore_best(run: Run, curve: list[dict]) -> int | None:
    """At the end: the best pass's weights become the run's; that pass (None: keep_best off,
    the last pass's weights stay)."""
    if not run.step.keep_best:
        return None
    for n in run.params:  # onto the run's device, as load_state puts a saved state back
        run.params[n] = run.device.ops.load(run.params[n], run.best[n])
    return best_pass(curve)
