"""One run, one owner: `run_job` runs a job from end to end, the same way for every entry
that trains (the step stage, `spark train` and `spark run`, `spark code train`, `spark
apply-step`, the proof tools): the knobs checked before a first write, the job folder
locked once (folder.py), the job's inputs prepared when the entry prepares them, the loop
trained and committed (loop.py), or the failure recorded beside the last good outputs; an
interrupted run says how to continue it (docs/training.md "One run, one owner")."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.core.jobfiles import RESUME_STATE
from sparktrain.data.base import DataSource
from sparktrain.data.source import prepare_job
from sparktrain.model.config import MAX_SHARDS, ModelConfig
from sparktrain.train.plan import step_fits
from sparktrain.model.parallel import quiet_nonfinite
from sparktrain.params import StepConfig
from sparktrain.runtime import MAX_WORKERS, default_workers
from sparktrain.train.folder import JobFolder
from sparktrain.train.job import Job
from sparktrain.train.live import StderrLines
from sparktrain.train.loop import train_and_commit
from sparktrain.train.records import StepResult, failure_record


@dataclass(frozen=True)
class Prepare:
    """What the tokenizer and prepare stages make, for an entry that runs them itself:
    the tokenizer kind and its vocabulary size (a BPE's; byte tokens have their own)."""
    tokenizer: str
    vocab_size: int

    @property
    def vocab(self) -> int | None:
        return self.vocab_size if self.tokenizer != "byte" else None


def run_job(job: Job, step: StepConfig, cfg: ModelConfig, source: DataSource, *,
            folder: JobFolder | None = None, prepare: Prepare | None = None,
            labels: dict | None = None, progress=None) -> StepResult:
    """Check, lock, prepare (when `prepare`), train and commit `job`; a TrainingFailed is
    recorded in failed.json, then raised. `folder`: the job folder when the caller locked
    it already (apply-step reads its base under the lock) and holds it; else one is made,
    locked and released here. `progress`: where the lines go (default stderr)."""
    say = progress if progress is not None else StderrLines()
    if prepare is not None:
        preflight(step, cfg, source, prepare.vocab)
    owner = folder is None
    folder = folder if folder is not None else JobFolder(job.out_dir)
    try:
        with folder.writes():  # a write error is one line; a folder it made goes on failure
            folder.lock()
            if prepare is not None:  # staged: they replace the job's in the weights' commit
                prepare_job(folder.stage_inputs(), source, prepare.tokenizer,
                            prepare.vocab_size)
            return _attempt(job, folder, step, cfg, source, labels, say)
    finally:
        if owner:
            folder.unlock()


def _attempt(job: Job, folder: JobFolder, step: StepConfig, cfg: ModelConfig,
             source: DataSource, labels: dict | None, say) -> StepResult:
    """One attempt at the job's STEP, numpy's non-finite warnings off."""
    with quiet_nonfinite():
        try:
            return train_and_commit(job, step, cfg, source, folder=folder, progress=say,
                                    labels=labels)
        except TrainingFailed as err:
            folder.write_failure(failure_record(job, err, step))
            raise
        except BaseException as err:
            if not isinstance(err, Exception):  # Ctrl-C, SIGTERM: how to go on from here
                say(f"[{job.id}] interrupted; {resume_note(folder, step)}")
            raise


def resume_note(folder: JobFolder, step: StepConfig) -> str:
    """What an interrupted run left: a state the same command continues, or how to have
    one next time (the weights of the last finished run stay as they were)."""
    if (folder.path / RESUME_STATE).is_file():
        return (f"a resumable state of this run is saved in {folder.path.as_posix()}; the "
                f"same command continues it (to the same final bytes)")
    every = ("no pass finished since the last saved state" if step.checkpoint_every
             else "step.checkpoint_every is 0")
    return (f"no resumable state was saved ({every}); with step.checkpoint_every 1 "
            f"(--checkpoint-every 1) a state is saved after every pass and the same command "
            f"then continues an interrupted run")


def preflight(step: StepConfig, cfg: ModelConfig, source: DataSource,
              vocab: int | None = None) -> None:
    """What the loop would refuse (every knob, the memory estimate), before a first write."""
    if not 1 <= step.shards <= MAX_SHARDS:
        raise SparkError(f"shards must be in [1, {MAX_SHARDS:,}], got {step.shards:,}")
    workers = step.workers if step.workers is not None else default_workers()  # SPARK_WORKERS
    if not 1 <= workers <= MAX_WORKERS:
        raise SparkError(f"workers must be in [1, {MAX_WORKERS:,}], got {workers:,}")
    cfg = dataclasses.replace(cfg, vocab=vocab or cfg.vocab).validate()
    step_fits("training", cfg, step, source.row_bound(), loss_rows=source.loss_rows)
