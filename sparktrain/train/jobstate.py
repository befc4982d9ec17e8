"""The reader of a job folder's state, read only: declared, trained (its weights verified
against checkpoint.json), failed, running or absent, with eval's metrics only when they
were measured on those weights (docs/outputs.md). The writer is outputs.py."""
from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

from sparktrain.core import compat
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import read_input, sha256_file
from sparktrain.core.jobfiles import (ARTIFACT, CHECKPOINT, CORPUS, CORPUS_FILES, EVAL,
                                      EVAL_DETAIL, FAILED, PERF, STATUS, TOKENIZER, WEIGHTS)
from sparktrain.core.metric_keys import split_headline
from sparktrain.core.values import number
from sparktrain.train.outputs import (current_file, held_elsewhere, journal_names,
                                     parse_artifact, read_job_json)


def _scrub(obj, depth: int = 0):
    """A record as job_state repeats it: a non-finite number becomes None (valid JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if depth > 64:
        return None
    if isinstance(obj, dict):
        return {k: _scrub(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v, depth + 1) for v in obj]
    return obj


def _record(path: Path):
    rec = read_job_json(path)
    return _scrub(rec) if isinstance(rec, dict) else None


def job_state(folder: str | os.PathLike, job_id: str | None = None,
              current_step: dict | None = None) -> dict:
    """The real state of a job folder, read only: declared, trained (weights verified),
    failed or absent, with eval's metrics only when measured on them (docs/outputs.md)."""
    folder = Path(folder)
    journal = journal_names(folder) if folder.is_dir() else []
    state: dict = {"job": job_id or folder.name, "out": folder.as_posix(), "state": "absent"}
    status = _record(folder / STATUS)
    if isinstance(status, dict):
        state.update({k: status[k] for k in ("dataset", "base", "method", "arch", "n_params")
                      if k in status}, state="declared")
    artifact = current_file(folder, ARTIFACT, journal)
    if artifact.is_file():
        try:
            text = read_input(artifact, "job file").decode("utf-8", errors="replace")
        except SparkError:
            text = ""
        state.update(artifact=parse_artifact(text), state="declared")
    ckpt, verified, trained = _trained_state(folder, journal)
    state.update(trained)
    failed = _record(folder / FAILED)
    if isinstance(failed, dict):
        current = failure_is_current(failed, current_step)
        if current or not verified:
            state["state"] = "failed"
        state.update(failure=failed, failure_current=current)
    perf = _record(current_file(folder, PERF, journal))
    if isinstance(perf, dict):
        if number(perf.get("tokens_per_s")) is None or number(perf.get("total_seconds")) is None:
            state["perf_unreadable"] = ("perf.json lacks a finite tokens_per_s or total_seconds; "
                                        "its numbers are not shown")
        else:
            state["perf"] = perf
    # eval.json: the headline numbers; eval_detail.json: the rest (a pre-split one: both)
    ev, detail = _record(folder / EVAL), _record(folder / EVAL_DETAIL)
    if isinstance(ev, dict):
        ev = compat.whole_eval(ev, detail)
        if verified and ev.get("weights_sha256", ckpt.get("weights_sha256")) == \
                ckpt.get("weights_sha256"):
            state["eval"], state["eval_detail"] = split_headline(ev)
        else:
            state["eval_stale"] = ("eval.json was not measured on verified weights in this "
                                   "folder; its metrics are not shown")
    if folder.is_dir() and held_elsewhere(folder):  # the files above are the last finished run's
        state.update(state="running", last_state=state["state"])
    return state


def _trained_state(folder: Path, journal: list[str]) -> tuple[object, bool, dict]:
    """(checkpoint.json as read, whether the weights it names are verified, the job
    state's fields of the run it claims: {} when it claims no trained run)."""
    ckpt = _record(current_file(folder, CHECKPOINT, journal))
    if not (isinstance(ckpt, dict) and ckpt.get("trained") is True):
        return ckpt, False, {}
    weights, sha = current_file(folder, WEIGHTS, journal), ckpt.get("weights_sha256")
    verified = False
    with contextlib.suppress(SparkError):  # above the size cap: not verified
        verified = weights.is_file() and sha256_file(weights, "weights file") == sha
    fields = dict(state="trained" if verified else "failed",
                  step_n=ckpt["step_n"] if isinstance(number(ckpt.get("step_n")), int) else None,
                  loss_before=number(ckpt.get("loss_before")),
                  loss_after=number(ckpt.get("loss_after")),
                  weights=ckpt.get("weights") if isinstance(ckpt.get("weights"), str) else None,
                  weights_sha256=sha if isinstance(sha, str) else None,
                  weights_verified=verified)
    if not verified:
        fields["reason"] = ("weights file missing, above the weights size cap, or its sha256 "
                            "differs from checkpoint.json")
    elif mixed := _mixed_inputs(folder, ckpt, journal):
        verified = False
        fields.update(state="failed", weights_verified=False, reason=mixed)
    return ckpt, verified, fields


def _mixed_inputs(folder: Path, ckpt: dict, journal: list[str]) -> str | None:
    """Why the job's tokenizer.json or corpus/ is not the one its weights were trained
    with (a set that is not one run's), or None when they match (or none is recorded)."""
    recorded = ckpt.get("tokenizer_sha256")
    if not isinstance(recorded, str):
        return None
    tokenizer = current_file(folder, TOKENIZER, journal)
    try:
        on_disk = sha256_file(tokenizer, "job file") if tokenizer.is_file() else None
    except SparkError:
        on_disk = None
    if on_disk != recorded:
        return (f"{TOKENIZER} is not the tokenizer the weights were trained with (sha256 "
                f"{recorded[:12]}... in checkpoint.json): the job's files are not one run's")
    files = _record(current_file(folder, CORPUS, journal) / CORPUS_FILES)
    if isinstance(files, dict) and files.get("tokenizer_sha256") not in (None, recorded):
        return (f"{CORPUS}/{CORPUS_FILES} was prepared with another tokenizer than the "
                "weights': the job's files are not one run's")
    return None


def failure_is_current(failed: dict, current_step: dict | None) -> bool:
    """Whether a failed run's knobs are `current_step`'s (unknown current knobs: yes)."""
    if current_step is None:
        return True
    recorded = failed.get("step")
    return recorded == current_step if isinstance(recorded, dict) \
        else compat.pre_step_failure_matches(failed, current_step)
