"""DVC stage step: STEP, the one run of a job (sparktrain/train/runner.py) over the
job's data source; writes weights.safetensors, checkpoint.json and ARTIFACT
under out/train/<job>/ (perf.json too, undeclared: timings vary).

DVC deletes a stage's outputs before it runs it. When training fails, the
previous good outputs are copied back from the DVC cache (as dvc.lock records
them), so the workspace keeps the last trained model and its metrics agree; for
any other failure stages/common.py does the same.
"""
import sys
from pathlib import Path

from sparktrain.core.errors import TrainingFailed
from sparktrain.core.jobfiles import CHECKPOINT
from sparktrain.repro.dvclock import restore_outputs
from sparktrain.train.runner import run_job
from stages.common import params, run
from stages.job import job_source

STAGE = "step"


def step() -> Path:
    p = params()
    job, source = job_source(p)
    try:
        run_job(job, p.step, p.model_config(), source)
    except TrainingFailed as err:  # recorded in failed.json; the last good outputs come back
        raise TrainingFailed(f"{err}; {restore_outputs(STAGE, job.out_dir)}") from None
    return job.out_dir / CHECKPOINT


if __name__ == "__main__":
    sys.exit(run(STAGE, step))
