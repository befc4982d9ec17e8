"""DVC stage train-status: TRAIN's dry accept: validate the job and write its plan
(out/train/<job>/status.json: arch, parameter count, FLOPs, and the data
source's counts in the tokens of the job's tokenizer.json)."""
import sys
from pathlib import Path

from sparktrain.train.plan import job_plan, write_status
from stages.common import params, run
from stages.job import job_source


def train_status() -> Path:
    p = params()
    job, source = job_source(p)
    return write_status(job, job_plan(job, p.model_config(), p.step.batch_size, source))


if __name__ == "__main__":
    sys.exit(run("train-status", train_status))
