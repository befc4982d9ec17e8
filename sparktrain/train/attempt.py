"""One attempt at a job's STEP, as the step stage and every train command make it."""
from __future__ import annotations

from sparktrain.core.errors import TrainingFailed
from sparktrain.model.parallel import quiet_nonfinite
from sparktrain.train.loop import run_step
from sparktrain.train.record import run_failed


def step_job(job, step, cfg, source, **run_kw):
    """run_step's result, numpy's non-finite warnings off (the loop says "training
    diverged" in one line); a TrainingFailed is recorded in failed.json, then raised."""
    with quiet_nonfinite():
        try:
            return run_step(job, step, cfg, source, **run_kw)
        except TrainingFailed as err:
            run_failed(job, err, step)
            raise
