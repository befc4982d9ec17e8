"""What the stage scripts share: their params, the job folder, one-line errors.

Every stage declares this file in dvc.yaml right after its own script. See
docs/pipeline.md for the stages, their files and how their deps are checked.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Callable

from sparktrain.data.base import DataSource
from sparktrain.data.source import source_for
from sparktrain.core.errors import SparkError, TrainingFailed, printable
from sparktrain.core.fsutil import read_input, write_error
from sparktrain.core.jobfiles import PROGRAM, job_dir
from sparktrain.params import PARAMS_FILE, Params, StepConfig, load_params
from sparktrain.repro import lock
from sparktrain.train.job import Job, validate_job
from sparktrain.core.safeload import load_json


def params() -> Params:
    """The whole params.yaml, validated: a typo anywhere stops every stage."""
    return load_params(PARAMS_FILE)


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


# Step keys that leave the training recipe as it is (stamps, seeds, where it runs),
# and lr: params.yaml's own rate (0.03) is not the schema's (0.1), and a rate alone
# does not make the pairs job's byte / SGD 4 x 8 recipe one for a corpus.
NOT_RECIPE = ("step_n", "seed", "shards", "workers", "device", "checkpoint_every", "lr",
              "stop_after_pass")


def untuned_for_corpus(p: Params) -> bool:
    """True when nobody chose the training recipe: the byte tokenizer and every
    recipe key of `step` but its rate at the schema's defaults, which are the pairs
    job's in params.yaml (`-S job=job-coder-tiny -S program=...` alone)."""
    default = StepConfig()
    return p.tokenizer == "byte" and all(
        getattr(p.step, name) == getattr(default, name)
        for name in StepConfig.__dataclass_fields__ if name not in NOT_RECIPE)


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


# What DVC writes after a stage beyond the copies of its outputs: a test file in the cache
# and one beside each output (its link test), the run-cache entry, dvc.lock, its lock
# file. A tmpfs needed 16 KiB more than the copies for the eval stage; this keeps
# sixteen times that, so only a disk within a quarter MiB of full is refused.
DVC_SLACK = 256 * 1024


def _on_disk(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists (a cache not yet made)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_room(files: dict[Path, bytes]) -> None:
    """Under `dvc repro`, refuse in one line, before a byte is written, when a disk cannot
    hold `files`, DVC's cache copies of those not in its cache yet, and DVC_SLACK: DVC
    would otherwise fail after the stage succeeded, in its own words, with its temp
    files left beside the outputs (docs/outputs.md, "What a job holds")."""
    if not os.environ.get("DVC_STAGE"):  # run by hand: a failed write is its own line
        return
    objects = lock.cache_dir() / "files" / "md5"
    cache_disk = _on_disk(objects)
    need: dict[int, tuple[Path, int]] = {}   # st_dev -> (a folder on it, bytes)
    for path, data in files.items():
        md5 = hashlib.md5(data).hexdigest()
        cached = (objects / md5[:2] / md5[2:]).is_file()
        for folder in [path.parent] + ([] if cached else [cache_disk]):
            dev, block = os.stat(folder).st_dev, os.statvfs(folder).f_frsize
            where, size = need.get(dev, (folder, 0))
            need[dev] = where, size - (-len(data) // block) * block  # whole blocks
    for where, size in need.values():
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize
        if free < size + DVC_SLACK:
            raise SparkError(f"not enough space on the disk of {where.as_posix()}: "
                             f"{free // 1024:,} KiB free, {(size + DVC_SLACK) // 1024:,} KiB "
                             f"needed (the outputs, their DVC cache copies and DVC's records); "
                             f"free some and run `dvc repro` again")


def run(name: str, stage: Callable[[], object]) -> int:
    """Run one stage: exit 0 with the path written, 1 when training failed,
    2 with one line for a user mistake or a write the OS refused (a full disk, ...),
    130/143 on SIGINT/SIGTERM (outputs restored)."""
    lock.on_sigterm()
    try:
        path = stage()
    except TrainingFailed as err:
        print(f"stage {name}: training failed: {printable(str(err))}", file=sys.stderr)
        return 1
    except (SparkError, OSError) as err:  # DVC removed the outputs before the run: put them back
        line = write_error(err.filename or "a stage output", err) if isinstance(err, OSError) \
            else str(err)  # a full, read-only or failing disk, a denied write: one line too
        note = lock.restored_note(name, lambda: job_dir(params().job))
        print(f"stage {name}: error: {printable(line + note)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return lock.interrupted(name, "SIGINT", lambda: job_dir(params().job))
    except lock.Terminated:
        return lock.interrupted(name, "SIGTERM", lambda: job_dir(params().job))
    if path is not None:
        print(f"stage {name}: wrote {Path(path).as_posix()}", file=sys.stderr)
    return 0
