"""TRAIN's dry accept: validate the job and describe the run it would make; a pure
function of program, dataset, tokenizer and params (a DVC output: no timings). And a
training step's memory check, step_fits (the runner's preflight and the loop ask it)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from sparktrain.data.base import DataSource
from sparktrain.data.tokenizer import job_tokenizer
from sparktrain.core.fsutil import atomic_write_bytes, canonical_json
from sparktrain.core.jobfiles import ARTIFACT, STATUS
from sparktrain.model.config import ModelConfig, flops_per_token, n_params
from sparktrain.model.memory import Estimate, check_fits
from sparktrain.params import OPTIMIZER_MOMENTS
from sparktrain.train import jobstate, outputs
from sparktrain.train.folder import JobFolder
from sparktrain.train.job import Job


def job_plan(job: Job, cfg: ModelConfig, batch_size: int, source: DataSource) -> dict:
    """The job, the arch in the vocab of the folder's tokenizer, the source's counts."""
    tokenizer, tokenizer_sha256 = job_tokenizer(job.out_dir)
    cfg = dataclasses.replace(cfg, vocab=tokenizer.vocab)
    return {
        "job": job.id, "state": "declared", "mode": "dry-run", "trained": False,
        "not_sgd": True, "method": job.method, "program": job.program,
        "sparkbc_sha256": job.sparkbc_sha256, "bind": job.bind, "out": job.out,
        "dataset": job.dataset, "base": job.base,
        "init": "base weights" if job.base_is_weights else "fresh init (seeded)",
        "arch": cfg.to_dict(), "n_params": n_params(cfg),
        "flops_per_token": flops_per_token(cfg),
        **source.plan(cfg, batch_size, tokenizer, tokenizer_sha256),
    }


def write_status(job: Job, plan: dict, path: str | Path | None = None) -> Path:
    path = Path(path) if path else job.out_dir / STATUS
    with JobFolder(path.parent):  # written by the folder's one writer, released after
        atomic_write_bytes(path, canonical_json(plan).encode())
    return path


def dry_accept(job: Job, cfg: ModelConfig, batch_size: int, source: DataSource) -> dict:
    """`spark run`'s TRAIN: status.json, and an ARTIFACT stub unless the job is trained."""
    plan = job_plan(job, cfg, batch_size, source)
    write_status(job, plan)
    state = jobstate.job_state(job.out_dir, job.id)
    if state["state"] != "trained":
        with JobFolder(job.out_dir):
            atomic_write_bytes(job.out_dir / ARTIFACT, outputs.dry_artifact(job).encode())
    return plan


def step_fits(what: str, cfg: ModelConfig, step, rows_bound: int | None = None,
              loss_rows: int = 0) -> Estimate:
    """check_fits for a training step: the larger of batch_size and the loop's loss batches
    (`loss_rows`), at most rows_bound (the dataset's rows when known)."""
    rows = max(step.batch_size, loss_rows)
    rows = rows if rows_bound is None else max(1, min(rows, rows_bound))
    plain = step.optimizer == "sgd" and not step.momentum
    return check_fits(what, cfg, rows, 0 if plain else OPTIMIZER_MOMENTS[step.optimizer])
