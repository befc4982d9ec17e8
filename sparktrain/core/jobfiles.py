"""Where things are: the project root, found as git and DVC find theirs (the nearest folder
upwards holding `dvc.yaml` or `.dvc/`; docs/pipeline.md, "Where commands run"), and the
files of a job folder: their names (the one table; docs/outputs.md) and its place."""
from __future__ import annotations

import os
import re
from pathlib import Path

from sparktrain.core.errors import SparkError

OUT = "out"
PARAMS_FILE = "params.yaml"   # the knobs, at the root beside dvc.yaml (sparktrain/params.py)
JOBS_ROOT = Path("out/train")   # the pipeline's job folders: out/train/<job id>/
# a corpus's compressor baselines, by its sha256 (data/baselines.py): not a DVC output
BASELINE_CACHE = Path("out/cache/baselines")

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
LIVE_DIR = "dvclive"            # step: DVCLive's curves (dvc plots)
LIVE_PENDING = ".live-run"      # step: DVCLive's folder of a run not yet committed
JOURNAL = ".commit"             # the commit journal: the names an interrupted commit renames
STAGED = ".inputs.pending"      # a run's new tokenizer.json and corpus/, until its commit
LOCK = ".lock"                  # the job's flock: one spark process writes a job at a time
# inside CORPUS (prepare): the files read and their hashes; a corpus job's token streams
CORPUS_FILES, TRAIN_BIN, VAL_BIN = "files.json", "train.bin", "val.bin"
CODER_PROOF = "coder_proof.json"  # tools/coder_proof.py: the coder proof's report
DVC_IGNORE = ".gitignore"       # DVC writes one beside the outputs it tracks
# what a job folder holds (and the commit journal's dot files): the output gate's allowlist
JOB_NAMES = frozenset({PROGRAM, TOKENIZER, CORPUS, STATUS, WEIGHTS, CHECKPOINT, ARTIFACT, PERF,
                       FAILED, RESUME_STATE, RESUME_TENSORS, EVAL, EVAL_DETAIL, LOSS_PNG,
                       LIVE_DIR, LIVE_PENDING, LOCK, JOURNAL, STAGED, CODER_PROOF,
                       DVC_IGNORE})

_JOB_ID = re.compile(r"[A-Za-z0-9._-]+")


def job_dir(job_id: str, root: str | Path | None = None) -> Path:
    """The pipeline's folder of a job: out/train/<job id> (under `root` when given)."""
    return (Path(root) / JOBS_ROOT if root is not None else JOBS_ROOT) / job_id


def check_job_id(job: str) -> str:
    if (not isinstance(job, str) or not _JOB_ID.fullmatch(job) or job in (".", "..")
            or len(job) > 255):
        shown = job if not isinstance(job, str) or len(job) <= 80 else job[:40] + "..."
        raise SparkError(f"job id {shown!r} is not a safe single path component "
                         "([A-Za-z0-9._-]+, at most 255 characters, not '.' or '..')")
    return job


def root_of(start: str | Path | None = None, git: bool = False) -> Path | None:
    """The nearest folder at or above `start` (default: the current one) holding dvc.yaml
    or .dvc/ (or .git when `git`); None when there is none."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if ((folder / "dvc.yaml").is_file() or (folder / ".dvc").is_dir()
                or (git and os.path.lexists(folder / ".git"))):
            return folder
    return None


def find_root(start: str | Path | None = None) -> Path:
    """`root_of(start)`, or one line when there is none."""
    found = root_of(start)
    if found is not None:
        return found
    here = Path(start if start is not None else Path.cwd()).resolve()
    raise SparkError(f"not inside a Spark Train project: no dvc.yaml or .dvc/ in {here} or "
                     f"any folder above it; run this in a clone of the project")
