"""What the stages after decode-bc share: the job decode-bc resolved (program.json), re-checked,
and the data source of its dataset (docs/pipeline.md).
"""
from __future__ import annotations

import os

from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import read_input
from sparktrain.core.jobfiles import PROGRAM, job_dir
from sparktrain.core.safeload import load_json
from sparktrain.data.base import DataSource
from sparktrain.data.source import source_for
from sparktrain.knobs import defaults, recipe
from sparktrain.params import Params, StepConfig
from sparktrain.train.job import Job, validate_job


def load_job(p: Params) -> Job:
    """The TRAIN that decode-bc resolved, re-checked (the file may have been edited)."""
    path = job_dir(p.job) / PROGRAM
    try:
        doc = load_json(read_input(path, "decoded program"), os.fspath(path))
        job = Job.from_dict(doc["job"])
    except (ValueError, TypeError, KeyError):
        raise SparkError(f"{path} is not a decoded program; run the decode-bc stage "
                         f"(`dvc repro decode-bc`)") from None
    if job.id != p.job:
        raise SparkError(f"{path} holds job {job.id!r}, params.yaml asks for {p.job!r}")
    return validate_job(job)


def untuned_for_corpus(p: Params) -> bool:
    """True when nobody chose the training recipe: the byte tokenizer and every
    recipe knob of `step` (its role says which) at the schema's defaults, which are the
    pairs job's in params.yaml (`-S job=job-coder-tiny -S program=...` alone)."""
    default = defaults(StepConfig)
    return p.tokenizer == "byte" and all(getattr(p.step, name) == default[name]
                                         for name in recipe(StepConfig))


def job_source(p: Params) -> tuple[Job, DataSource]:
    """The job and its data source (eval.data is the held-out file of a pairs job).
    A corpus job with the pairs job's knobs is refused: it would lose to zlib
    without a word."""
    job = load_job(p)
    source = source_for(job.dataset, p, heldout=p.eval.data)
    if source.streamed and untuned_for_corpus(p):
        raise SparkError(f"{job.id} trains a corpus, but its knobs are params.yaml's, made "
                         f"for the pairs job (byte tokens, SGD, {p.step.outer} x "
                         f"{p.step.inner} steps); run the coder recipe through DVC with "
                         f"`spark code train --scale tiny --dvc-command`'s command, or choose "
                         f"its knobs (`-S ++tokenizer=bpe -S ++step.optimizer=adamw "
                         f"-S ++step.lr=0.01 ...`: ++ adds a key params.yaml lacks)")
    return job, source
