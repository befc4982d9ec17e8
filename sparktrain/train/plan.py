"""TRAIN's dry accept: validate the job and describe the run it would make.

Everything here is a pure function of the program, dataset and params (it is
a DVC output, hashed into dvc.lock): no timings, no absolute paths.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from sparktrain.data.tokenizer import pairs_tokenizer
from sparktrain.fsutil import canonical_json
from sparktrain.model.config import ModelConfig, flops_per_token, n_params
from sparktrain.train import outputs
from sparktrain.train.data import load_dataset
from sparktrain.train.job import Job


def corpus_plan(job: Job, cfg: ModelConfig, batch_size: int) -> dict:
    """A corpus job's plan: windows of seq_len + 1 tokens; the corpus itself is read by
    the prepare stage and the vocab comes from the tokenizer stage."""
    tokens = batch_size * cfg.seq_len
    return {
        "job": job.job, "state": "declared", "mode": "dry-run", "trained": False,
        "not_sgd": True, "method": job.method, "program": job.program,
        "sparkbc_sha256": job.sparkbc_sha256, "bind": job.bind, "out": job.out,
        "dataset": job.dataset, "dataset_kind": "corpus", "base": job.base,
        "init": "base weights" if job.base_is_weights else "fresh init (seeded)",
        "arch": {k: v for k, v in cfg.to_dict().items() if k != "vocab"},
        "vocab": "from tokenizer.json", "windows_per_micro_step": batch_size,
        "tokens_per_micro_step": tokens,
    }


def job_plan(job: Job, cfg: ModelConfig, batch_size: int,
             tokenizer: str | Path | None = None) -> dict:
    """The plan; a pairs job's counts are in the tokens of `tokenizer` (a BPE
    tokenizer.json; None or the byte one: bytes, the plan as before)."""
    if job.is_corpus:
        return corpus_plan(job, cfg, batch_size)
    tok, tok_record = pairs_tokenizer(tokenizer)
    if tok is not None:
        cfg = dataclasses.replace(cfg, vocab=tok.vocab)
    dataset = load_dataset(job.dataset, cfg.seq_len, tok)
    pairs_per_step = min(batch_size, dataset.n)
    mean_tokens = dataset.n_tokens / dataset.n
    return {
        "job": job.job, "state": "declared", "mode": "dry-run", "trained": False,
        "not_sgd": True, "method": job.method, "program": job.program,
        "sparkbc_sha256": job.sparkbc_sha256, "bind": job.bind, "out": job.out,
        "dataset": job.dataset, "dataset_sha256": dataset.sha256, "dataset_rows": dataset.n,
        "dataset_tokens": dataset.n_tokens, "dataset_counted_targets": dataset.n_counted,
        "truncated": dataset.n_truncated, "base": job.base,
        "init": "base weights" if job.base_is_weights else "fresh init (seeded)",
        "arch": cfg.to_dict(), "n_params": n_params(cfg),
        "flops_per_token": flops_per_token(cfg),
        "pairs_per_micro_step": pairs_per_step,
        "flops_per_micro_step": int(round(flops_per_token(cfg) * mean_tokens * pairs_per_step)),
        **tok_record,
    }


def write_status(job: Job, plan: dict, path: str | Path | None = None) -> Path:
    path = Path(path) if path else job.out_dir / "status.json"
    outputs.lock_job(path.parent)
    outputs.atomic_write_bytes(path, canonical_json(plan).encode())
    return path


def dry_accept(job: Job, cfg: ModelConfig, batch_size: int) -> dict:
    """`spark run`'s TRAIN: status.json, and an ARTIFACT stub unless the job is
    already trained (a dry accept never downgrades a trained job's marker)."""
    plan = job_plan(job, cfg, batch_size)
    outputs.lock_job(job.out_dir)
    write_status(job, plan)
    state = outputs.job_state(job.out_dir, job.job)
    if state["state"] != "trained":
        outputs.atomic_write_bytes(job.out_dir / "ARTIFACT", outputs.dry_artifact(job).encode())
    return plan
