"""The files of a job folder: their names and where the folder is.

Every module that reads or writes a job's files names them through this one
table, so a name changes in one place. docs/outputs.md says what each holds.
"""
from __future__ import annotations

from pathlib import Path

JOBS_ROOT = Path("out/train")   # the pipeline's job folders: out/train/<job id>/

PROGRAM = "program.json"        # decode-bc: the program and the resolved TRAIN
TOKENIZER = "tokenizer.json"    # tokenizer: byte or the job's BPE
CORPUS = "corpus"               # prepare: files.json (+ train.bin / val.bin of a corpus)
STATUS = "status.json"          # train-status: the dry plan
WEIGHTS = "weights.safetensors"  # step: the trained tensors
CHECKPOINT = "checkpoint.json"  # step: the record of the run
ARTIFACT = "ARTIFACT"           # step: the marker (trained=true only for these weights)
PERF = "perf.json"              # step: timings (undeclared: they vary run to run)
FAILED = "failed.json"          # step: the last failed attempt, beside the good outputs
RESUME_STATE = "resume.json"    # step: the state between outer passes (checkpoint_every)
RESUME_TENSORS = "resume.safetensors"
EVAL = "eval.json"              # eval: the headline metrics (the DVC metric)
EVAL_DETAIL = "eval_detail.json"  # eval: counts, tables, samples, hashes
LOSS_PNG = "loss.png"           # eval: the loss picture


def job_dir(job_id: str, root: str | Path | None = None) -> Path:
    """The pipeline's folder of a job: out/train/<job id> (under `root` when given)."""
    return (Path(root) / JOBS_ROOT if root is not None else JOBS_ROOT) / job_id
