"""DVC stage train-status: TRAIN's dry accept: validate the job and write its plan
(out/train/<job>/status.json: arch, parameter count, dataset size, FLOPs; a pairs
job's counts in the tokens of its tokenizer.json)."""
import sys
from pathlib import Path

from sparktrain.train.plan import job_plan, write_status
from stages.common import load_job, params, run


def train_status() -> Path:
    p = params()
    job = load_job(p)
    return write_status(job, job_plan(job, p.model_config(), p.step.batch_size,
                                      tokenizer=job.out_dir / "tokenizer.json"))


if __name__ == "__main__":
    sys.exit(run("train-status", train_status))
