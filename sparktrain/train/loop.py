"""STEP: the one loop, outer passes of inner micro-steps over any data source and device
(docs/training.md "Data sources and the one loop"): it sets the run up from where it starts
(train/resume.py), trains, then records and commits what it may claim (train/records.py),
in the job folder its owner (train/runner.py) locked."""
from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np

from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.core.jobfiles import CORPUS
from sparktrain.data.base import DataSource, TrainingData, score
from sparktrain.data.tokenizer import job_tokenizer
from sparktrain.model.device import Device, resolve as resolve_device
from sparktrain.model.build import build_model
from sparktrain.model.dropout import Dropout
from sparktrain.model.config import ModelConfig
from sparktrain.model.parallel import GradientEngine
from sparktrain.params import StepConfig
from sparktrain.train import live
from sparktrain.train.average import WeightAverage
from sparktrain.train.best import check_measured, keep_if_best, restore_best
from sparktrain.train.folder import JobFolder
from sparktrain.train.job import Job
from sparktrain.train.optim import clipped_update, lr_at, make_optimizer
from sparktrain.train.plan import step_fits
from sparktrain.train.records import Counters, StepResult, changed_tensors, check_learned, commit
from sparktrain.train.resume import (fingerprint, initial_params, load_state, resolve_step_n,
                                     save_state)
from sparktrain.train.state import Run

EMBED = "spark.embed.weight"
LABELS = ("source", "command")  # free-text labels a run may record (spark apply-step)


def _finite_or_fail(value: float, what: str, where: str) -> None:
    if not np.isfinite(value):
        raise TrainingFailed(f"{what} is {value} {where}; training diverged "
                             "(lower step.lr or set step.clip); previous outputs kept")


def _set_up(job: Job, folder: JobFolder, step: StepConfig, cfg: ModelConfig,
            source: DataSource, say) -> Run:
    device = resolve_device(step.device)  # the CLI's Device (resolved once a process)
    inputs = folder.inputs  # the staged tokenizer and corpus, if this run prepared them
    tokenizer, tokenizer_sha256 = job_tokenizer(inputs)
    cfg = dataclasses.replace(cfg, vocab=tokenizer.vocab).validate()
    # refused from the shapes before anything large is allocated
    step_fits("training", cfg, step, source.row_bound(), loss_rows=source.loss_rows)
    model = build_model(cfg)
    if step.dropout and not step.train_attn:
        raise SparkError("step.dropout needs the attention model (step.train_attn true)")
    data = source.training_data(inputs / CORPUS, model, tokenizer, tokenizer_sha256, step)
    check_measured(step, data)
    salt = bytes.fromhex(job.sparkbc_sha256) if job.sparkbc_sha256 else b""
    params, base_step = initial_params(job, model, step.seed, salt, step.init_out)
    trainable = [n for n in params if step.train_embed or n != EMBED]
    if not trainable:
        raise SparkError("nothing to train: train_embed=false freezes the only trained tensor")
    start = {n: params[n].copy() for n in trainable}
    if device.note:
        say(f"[{job.id}] {device.note}")
    if line := device.kernel_note():  # a CPU off the portable kernel family says which
        say(f"[{job.id}] {line}")
    params = device.to_device(params)  # once: the optimizer's state is made beside them
    average = WeightAverage(step.ema, params, trainable) if step.ema is not None else None
    return Run(job=job, folder=folder, step=step, model=model, data=data, device=device,
               params=params, base_step=base_step,
               step_n=resolve_step_n(step.step_n, base_step, job.base), trainable=trainable,
               start=start, optimizer=make_optimizer(step, params, trainable),
               engine=GradientEngine(model, step.shards, device.workers(step.workers)),
               fingerprint=fingerprint(job, cfg, data.fingerprint, step, device),
               average=average)


def _point(run: Run, outer: int, phase: str) -> dict:
    """A loss_curve entry: the training set's loss, the held-out set's (and bpb if known), of
    the weights the run would commit (step.ema: the average)."""
    data, params = run.data, run.model_params()
    where = f"after outer {outer}" if outer else "at start"
    train = score(run.engine.batch_losses(params, data.train_set.batches), data.train_set)
    _finite_or_fail(train["loss"], "loss", where)
    point = {"outer": outer, "loss": train["loss"], "phase": phase}
    if data.heldout_set is not None:
        held = score(run.engine.batch_losses(params, data.heldout_set.batches),
                     data.heldout_set)
        _finite_or_fail(held["loss"], "held-out loss", where)
        point["heldout_loss"] = held["loss"]
        if "bpb" in held:
            point["heldout_bpb"] = held["bpb"]
    return point


def apply_update(run: Run, counts: Counters, batch, where: str, t: int) -> None:
    """Gradients of `batch`, the clipped update at micro-step `t`, counted in `counts`."""
    step, params = run.step, run.params
    ts = time.perf_counter()
    drop = Dropout(step.dropout, step.seed, t) if step.dropout else None  # masks keyed by t
    loss, grads = run.engine.loss_and_grads(params, batch, drop)
    _finite_or_fail(loss, "minibatch loss", where)
    _, scale = clipped_update(run.optimizer, step, params, grads, run.trainable, t,
                              step.outer * step.inner,
                              check=lambda norm: _finite_or_fail(norm, "gradient norm", where))
    if run.average is not None:
        run.average.update(params)
    counts.count(batch.n_tokens, batch.n_tokens * run.model.flops_per_token(batch.width),
              scale != 1.0, time.perf_counter() - ts)


def _run_passes(run: Run, counts: Counters, watch: live.Watcher) -> None:
    """Outer passes of inner micro-steps; the curve point after each to the watcher."""
    step = run.step
    total = step.outer * step.inner
    if not counts.curve:
        counts.curve.append(_point(run, 0, "start"))
    def lr_of(k: int) -> float:  # the lr logged with pass k's point
        return lr_at(step, max(k * step.inner - 1, 0), total)

    watch.start(counts.curve[-1], lr_of(counts.done), counts.done,
                f"{run.data.describe}, {run.model.n_params:,} params, "
                f"{step.outer}x{step.inner} micro-steps of {step.batch_size}"
                + (f", stopped after outer {step.stop_after_pass}" if step.stop_after_pass else ""),
                earlier=[(p, lr_of(p["outer"])) for p in counts.curve[:-1]])
    for k in range(counts.done + 1, step.passes() + 1):  # stop_after_pass: fewer, same schedule
        for i in range(step.inner):
            apply_update(run, counts, run.data.sampler.next(),
                         f"at outer {k} micro-step {i + 1}", (k - 1) * step.inner + i)
            watch.micro_step(k, counts.rate())
        counts.curve.append(_point(run, k, "after_outer"))
        counts.done = k
        keep_if_best(run, counts.curve)
        if step.checkpoint_every and k % step.checkpoint_every == 0 and k < step.passes():
            save_state(run, counts)
        watch.pass_done(counts.curve[-1], lr_at(step, k * step.inner - 1, total), counts.rate())


@contextlib.contextmanager
def out_of_memory_is_one_line(run: Run):
    """A GPU out of memory mid-run: TrainingFailed naming the shape and batch."""
    try:
        yield
    except Exception as err:
        if not run.device.is_out_of_memory(err):
            raise
        c = run.model.cfg
        raise TrainingFailed(
            f"{run.device.name} ran out of memory: dim {c.dim}, n_layer {c.n_layer}, seq_len "
            f"{c.seq_len}, vocab {c.vocab} with batch_size {run.step.batch_size} did not fit "
            "(lower step.batch_size, raise step.shards or take a smaller scale); previous "
            "outputs kept") from None


def train_and_commit(job: Job, step: StepConfig, cfg: ModelConfig, source: DataSource, *,
                     folder: JobFolder, progress=None, labels: dict | None = None) -> StepResult:
    """Train `job` on `source` (resuming this very run) and commit its outputs in `folder`,
    which the caller holds locked (train/runner.py: every entry calls it); `progress`: the
    lines (default stderr), `labels` (LABELS' keys): recorded in weights and checkpoint."""
    labels = dict(labels or {})
    if unknown := sorted(set(labels) - set(LABELS)):
        raise SparkError(f"unknown run labels {unknown}; known: {', '.join(LABELS)}")
    if not folder.locked:
        raise SparkError(f"job folder {folder.path.as_posix()} is not locked by this run")
    watch = live.Watcher(job.id, folder.path, step.passes(), step.inner, progress)
    run = _set_up(job, folder, step, cfg, source, watch.say)
    counts = Counters(t0=time.perf_counter())
    try:
        with run.engine:
            load_state(run, counts, watch.say)
            with watch, out_of_memory_is_one_line(run):
                _run_passes(run, counts, watch)
        run.params = run.model_params()  # step.ema: the average is the model committed
        counts.kept = restore_best(run, counts.curve)
        changed = changed_tensors(run)
        check_learned(counts.curve, run.model.cfg.vocab, counts.kept)
        result = commit(run, counts, changed, labels)
        if counts.kept is not None:
            watch.say(f"[{job.id}] kept the weights of outer {counts.kept}, the lowest held-out "
                      f"loss ({live.losses(counts.after())})")
        return result
    except BaseException:  # a resumed run rebuilds its curves from its state: none kept
        folder.discard_live()
        raise
