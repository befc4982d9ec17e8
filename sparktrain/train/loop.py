"""STEP: outer x inner minibatch SGD over a job's dataset, honest about the result.

The loop only claims what happened: the whole-dataset loss is measured before
and after each outer pass, and outputs saying `trained=true` are committed
only when gradients were applied, every loss and gradient stayed finite, some
weight changed and the loss fell. Anything else raises TrainingFailed and
leaves the previous outputs untouched.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sparktrain import BLAS_THREADS
from sparktrain.data.tokenizer import pairs_tokenizer
from sparktrain.errors import SparkError, TrainingFailed
from sparktrain.fsutil import canonical_json, sha256_bytes
from sparktrain.model.base import Model
from sparktrain.model.bench import matmul_peak as measure_matmul_peak
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig
from sparktrain.model.parallel import GradientEngine
from sparktrain.model.weights import check_params, config_from_meta, load_weights, weights_bytes
from sparktrain.train import outputs
from sparktrain.train.config import StepConfig, step_record
from sparktrain.train.data import Dataset, iter_batches, load_dataset
from sparktrain.train.job import Job
from sparktrain.train.optim import lr_at, make_optimizer

EMBED = "spark.embed.weight"
LOSS_BATCH = 64  # pairs per forward when measuring a whole-dataset loss


@dataclass
class StepResult:
    checkpoint: dict
    perf: dict
    weights_sha256: str
    files: dict = field(default_factory=dict)


class MinibatchSampler:
    """Seeded permutation, reshuffled each epoch; batch_size >= n: all, in file order."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size = n, batch_size
        self.rng = np.random.default_rng([seed, 0x5EED])
        self.order: np.ndarray = np.arange(0)
        self.pos = 0

    def next(self) -> np.ndarray:
        if self.batch_size >= self.n:
            return np.arange(self.n)
        if self.pos + self.batch_size > self.order.size:
            self.order = self.rng.permutation(self.n)
            self.pos = 0
        idx = self.order[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return idx


KEEP_ROWS = 4096  # up to this many rows, the loss batches are padded once and kept


class _Relaid:
    """The loss batches of a large set, laid out again at each measurement: kept
    padded, 200k short rows cost 30x their file (int64 grids); this keeps memory a
    small factor of the dataset, for one more pass over the rows per measurement."""

    def __init__(self, rows, make_batch):
        self.rows, self.make_batch = rows, make_batch

    def __iter__(self):
        return iter_batches(self.rows, LOSS_BATCH, self.make_batch)


def loss_batches(model: Model, dataset: Dataset):
    """The whole dataset in file order for every whole-dataset loss: small sets
    padded once and reused, large ones laid out batch by batch each time."""
    if len(dataset.encoded) > KEEP_ROWS:
        return _Relaid(dataset.encoded, model.make_batch)
    return list(iter_batches(dataset.encoded, LOSS_BATCH, model.make_batch))


def dataset_loss(engine: GradientEngine, params, batches) -> float:
    """Mean CE over the batches; each batch's sum comes back in order whichever
    worker computed it, so the value does not depend on the worker count."""
    total, count = 0.0, 0
    for s, c in engine.batch_losses(params, batches):
        total += s
        count += c
    return total / max(count, 1)


def initial_params(job: Job, model: Model, seed: int, salt: bytes):
    """(params, base step_n): the base weights when `base` is a file, else fresh init."""
    if not job.base_is_weights:
        return model.init_params(seed, salt, dtype=np.float32), 0
    params, meta = load_weights(job.base)
    base_cfg = config_from_meta(meta, job.base)
    if base_cfg.kind is not model.cfg.kind:
        raise SparkError(f"base {job.base} was trained with train_attn={base_cfg.train_attn}, "
                         f"this run has train_attn={model.cfg.train_attn}")
    check_params(params, model.cfg, job.base)
    step_n = meta.get("step_n", 0)
    if not isinstance(step_n, int) or isinstance(step_n, bool) or step_n < 0:
        raise SparkError(f"base {job.base}: metadata step_n {step_n!r} is not a count")
    return params, step_n


def resolve_step_n(requested: int | None, base_step: int, base: str) -> int:
    if requested is None:
        return base_step + 1
    if requested <= base_step:
        raise SparkError(f"step {requested} must be greater than the base's step_n {base_step} "
                         f"({base}); omit it to use {base_step + 1}")
    return requested


def _finite_or_fail(value: float, what: str, where: str) -> None:
    if not np.isfinite(value):
        raise TrainingFailed(f"{what} is {value} {where}; training diverged "
                             "(lower step.lr or set step.clip); previous outputs kept")


BLOWUP = 2.0   # an outer-pass loss above BLOWUP x the starting loss: the run blew up
MARGIN = 0.01  # nats below ln(vocab) a run must end, so a collapse to uniform never passes


def check_learned(curve: list[dict], vocab: int) -> None:
    """What a run must show before `trained=true` may be claimed.

    The loss fell; no outer pass blew up far above the start; and the end is
    better than predicting the uniform distribution over the vocabulary
    (ln vocab), which is where a diverged network collapses to.
    """
    loss_before, loss_after = curve[0]["loss"], curve[-1]["loss"]
    uniform = math.log(vocab)
    for point in curve[1:]:
        if point["loss"] > BLOWUP * loss_before:
            raise TrainingFailed(f"loss blew up to {point['loss']:.4f} after outer "
                                 f"{point['outer']} (start {loss_before:.4f}); training diverged "
                                 "(lower step.lr or set step.clip); previous outputs kept")
    if not loss_after < loss_before:
        raise TrainingFailed(f"loss did not fall: loss_after {loss_after:.6f} >= loss_before "
                             f"{loss_before:.6f}; previous outputs kept (try another step.lr)")
    if not loss_after < uniform - MARGIN:
        raise TrainingFailed(f"loss_after {loss_after:.4f} is no better than the uniform "
                             f"distribution (ln {vocab} = {uniform:.4f}); the run learned "
                             "nothing (lower step.lr?); previous outputs kept")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ set-up

@dataclass
class _Run:
    """Everything the loop reads and the SGD state it updates."""
    job: Job
    step: StepConfig
    model: Model
    dataset: Dataset
    params: dict[str, np.ndarray]
    base_step: int
    step_n: int
    trainable: list[str]
    start: dict[str, np.ndarray]     # trainable tensors before training
    optimizer: object                # train/optim.py: SGD (the seed's) or AdamW, keyed like params
    sampler: MinibatchSampler
    full_batch: object | None        # the whole dataset when one batch holds it
    whole: list                      # loss_batches: the whole-dataset loss
    engine: GradientEngine           # loss_and_grads over step.shards fixed shards
    heldout: list | None = None      # loss_batches of the held-out file, when one is given
    heldout_path: str | None = None
    tokenizer: dict = field(default_factory=dict)  # BPE: its kind and sha256, recorded in outputs

    def next_batch(self):
        if self.full_batch is not None:
            return self.full_batch
        return self.model.make_batch([self.dataset.encoded[j] for j in self.sampler.next()])


def _set_up(job: Job, step: StepConfig, cfg: ModelConfig, heldout: str | None = None,
            tokenizer: str | Path | None = None) -> _Run:
    tok, tok_record = pairs_tokenizer(tokenizer)
    if tok is not None:  # the model's vocab is the tokenizer's
        cfg = dataclasses.replace(cfg, vocab=tok.vocab)
    cfg.validate()
    model = build_model(cfg)
    salt = bytes.fromhex(job.sparkbc_sha256) if job.sparkbc_sha256 else b""
    dataset = load_dataset(job.dataset, cfg.seq_len, tok)
    params, base_step = initial_params(job, model, step.seed, salt)
    step_n = resolve_step_n(step.step, base_step, job.base)
    trainable = [n for n in params if step.train_embed or n != EMBED]
    if not trainable:
        raise SparkError("nothing to train: train_embed=false freezes the only trained tensor")
    if step.checkpoint_every:
        raise SparkError("step.checkpoint_every applies to corpus jobs; a pairs run is short "
                         "and is simply run again")
    run = _Run(
        job=job, step=step, model=model, dataset=dataset, params=params,
        base_step=base_step, step_n=step_n, trainable=trainable,
        start={n: params[n].copy() for n in trainable},
        optimizer=make_optimizer(step, params, trainable),
        sampler=MinibatchSampler(dataset.n, step.batch_size, step.seed),
        full_batch=model.make_batch(dataset.encoded) if step.batch_size >= dataset.n else None,
        whole=loss_batches(model, dataset),
        engine=GradientEngine(model, step.shards, step.workers), tokenizer=tok_record)
    if heldout is not None:
        run.heldout_path = heldout
        run.heldout = loss_batches(model, load_dataset(heldout, cfg.seq_len, tok))
    outputs.lock_job(job.out_dir)  # the only writer of this job until the process exits
    return run


# ---------------------------------------------------------------- the loop

@dataclass
class _Log:
    """What the loop did: the loss curve and the counters of checkpoint and perf."""
    t0: float
    curve: list[dict] = field(default_factory=list)
    train_seconds: float = 0.0
    tokens_seen: int = 0
    flops_seen: int = 0
    clipped: int = 0
    micro_steps: int = 0   # done so far: the schedule's clock


def _train(run: _Run, progress) -> _Log:
    """Outer passes of inner micro-steps, the whole-dataset loss before and after each pass."""
    step, job = run.step, run.job
    log = _Log(t0=time.perf_counter())
    loss_before = dataset_loss(run.engine, run.params, run.whole)
    _finite_or_fail(loss_before, "loss_before", "at start")
    log.curve.append(_point(run, 0, loss_before, "start"))
    progress(f"[{job.job}] start  loss {loss_before:.4f}  {run.dataset.n} pairs, "
             f"{run.model.n_params:,} params, {step.outer}x{step.inner} micro-steps")
    for k in range(1, step.outer + 1):
        for i in range(step.inner):
            _micro_step(run, log, run.next_batch(), f"at outer {k} micro-step {i + 1}")
        loss_k = dataset_loss(run.engine, run.params, run.whole)
        _finite_or_fail(loss_k, "dataset loss", f"after outer {k}")
        log.curve.append(_point(run, k, loss_k, "after_outer"))
        elapsed = time.perf_counter() - log.t0
        held = (f"  held-out {log.curve[-1]['heldout_loss']:.4f}"
                if "heldout_loss" in log.curve[-1] else "")
        progress(f"[{job.job}] outer {k}/{step.outer}  loss {loss_k:.4f}{held}  "
                 f"{log.tokens_seen / max(log.train_seconds, 1e-9):,.0f} tok/s  {elapsed:.1f}s")
    return log


def _point(run: _Run, outer: int, loss: float, phase: str) -> dict:
    """A loss_curve entry; with a held-out file, its loss at the same moment too."""
    point = {"outer": outer, "loss": loss, "phase": phase}
    if run.heldout is not None:
        held = dataset_loss(run.engine, run.params, run.heldout)
        _finite_or_fail(held, "held-out loss", f"after outer {outer}")
        point["heldout_loss"] = held
    return point


def _micro_step(run: _Run, log: _Log, batch, where: str) -> None:
    """One optimizer update (SGD with momentum by default) on the next batch."""
    apply_update(run, log, batch, where, log.micro_steps)
    log.micro_steps += 1


def apply_update(run, log, batch, where: str, t: int) -> None:
    """Gradients of `batch`, global-norm clipping, the optimizer's update at
    micro-step `t`, timed and counted in `log`; shared by the pairs and corpus loops."""
    step, params = run.step, run.params
    ts = time.perf_counter()
    loss, grads = run.engine.loss_and_grads(params, batch)
    _finite_or_fail(loss, "minibatch loss", where)
    norm = float(np.sqrt(sum(float(np.dot(grads[n].ravel(), grads[n].ravel()))
                             for n in run.trainable)))
    _finite_or_fail(norm, "gradient norm", where)
    scale = 1.0
    if step.clip > 0 and norm > step.clip:
        scale, log.clipped = step.clip / norm, log.clipped + 1
    run.optimizer.update(params, grads, lr_at(step, t, step.outer * step.inner), scale)
    log.train_seconds += time.perf_counter() - ts
    log.tokens_seen += batch.n_tokens
    log.flops_seen += batch.n_tokens * run.model.flops_per_token(batch.width)


def changed_tensors(run: _Run) -> list[str]:
    """The names of the trained tensors that changed; TrainingFailed if none did."""
    changed = [n for n in run.trainable if not np.array_equal(run.start[n], run.params[n])]
    if not changed:
        raise TrainingFailed("no weight changed during training; nothing to claim")
    return changed


# -------------------------------------------------------------- the record

def _weights_meta(run: _Run, log: _Log, labels: dict) -> dict:
    job = run.job
    return {"job": job.job, "step_n": run.step_n, "trained": True, "not_sgd": False,
            "arch": run.model.cfg.to_dict(), "loss_before": log.curve[0]["loss"],
            "loss_after": log.curve[-1]["loss"], "sparkbc_sha256": job.sparkbc_sha256,
            "dataset_sha256": run.dataset.sha256, "base": job.base, **run.tokenizer, **labels}


def run_record(run, log, changed: list[str], weights_sha256: str) -> dict:
    """The checkpoint keys every STEP writes (pairs and corpus loops alike): who
    ran, with which knobs, what changed and the claims (docs/outputs.md)."""
    job, step, cfg = run.job, run.step, run.model.cfg
    return {
        "job": job.job, "step_n": run.step_n, "loss_before": log.curve[0]["loss"],
        "loss_after": log.curve[-1]["loss"], "loss_curve": log.curve, **step_record(step),
        "train_attn": cfg.train_attn, "dataset": job.dataset,
        "arch": cfg.to_dict(), "n_params": run.model.n_params, "trained_tensors": len(changed),
        "frozen_tensors": ",".join(sorted(set(run.params) - set(run.trainable))),
        "micro_steps": step.outer * step.inner, "clipped_steps": log.clipped,
        "tokens_seen": log.tokens_seen, "weights": job.rel("weights.safetensors"),
        "weights_sha256": weights_sha256, "sparkbc_sha256": job.sparkbc_sha256,
        "program": job.program, "method": job.method, "base": job.base,
        "base_step_n": run.base_step, "blas_threads": BLAS_THREADS, "trained": True,
        "not_sgd": False, "sgd": True, "claim": False, "device": "cpu",
    }


def _checkpoint(run: _Run, log: _Log, changed: list[str], weights_sha256: str,
                labels: dict) -> dict:
    """checkpoint.json of a pairs job: a contract (docs/outputs.md), its keys and values fixed."""
    dataset = run.dataset
    return {
        **run_record(run, log, changed, weights_sha256),
        "dataset_sha256": dataset.sha256, "dataset_n": dataset.n,
        "dataset_tokens": dataset.n_tokens, "truncated": dataset.n_truncated,
        **run.tokenizer, **labels,
        **({"heldout": run.heldout_path} if run.heldout_path else {}),
    }


# -------------------------------------------------------------- the commit

def _commit(run: _Run, log: _Log, changed: list[str], matmul_peak, labels: dict) -> StepResult:
    return commit_step(run, log, _weights_meta(run, log, labels), matmul_peak,
                       lambda wsha: _checkpoint(run, log, changed, wsha, labels))


def commit_step(run, log, meta: dict, matmul_peak, make_checkpoint,
                after_commit=lambda: None) -> StepResult:
    """Write weights + checkpoint + ARTIFACT as one commit, then perf.json beside
    them; shared by the pairs and corpus loops. `make_checkpoint(weights_sha256)`
    builds the checkpoint, which names the weights' hash."""
    job = run.job
    wbytes = weights_bytes(run.params, meta)
    wsha = sha256_bytes(wbytes)
    checkpoint = make_checkpoint(wsha)
    files = {"weights.safetensors": wbytes,
             "checkpoint.json": canonical_json(checkpoint).encode(),
             "ARTIFACT": outputs.sgd_artifact(job, run.step_n).encode()}
    outputs.commit_files(job.out_dir, files)
    outputs.clear_failure(job.out_dir)
    after_commit()
    perf = _perf(log.train_seconds, time.perf_counter() - log.t0, log.tokens_seen,
                 log.flops_seen, matmul_peak)
    perf.update(shards=run.engine.shards, workers=run.engine.workers)
    outputs.atomic_write_bytes(job.out_dir / "perf.json", canonical_json(perf).encode())
    return StepResult(checkpoint=checkpoint, perf=perf, weights_sha256=wsha, files=files)


LABELS = ("source", "command")  # free-text labels a run may record (spark apply-step)


def run_step(job: Job, step: StepConfig, cfg: ModelConfig, *, progress=_progress,
             matmul_peak=None, labels: dict | None = None,
             heldout: str | None = None, tokenizer: str | Path | None = None) -> StepResult:
    """Train `job` and commit weights.safetensors + checkpoint.json + ARTIFACT.
    `labels` (keys of LABELS) are recorded in the weights metadata and checkpoint;
    with `heldout` (a JSONL file never trained on), every loss_curve entry also
    holds that file's loss (`heldout_loss`), as nanoGPT logs val loss. With
    `tokenizer` (a BPE tokenizer.json) rows are its ids and the vocab is its own."""
    labels = dict(labels or {})
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise SparkError(f"unknown run labels {unknown}; known: {', '.join(LABELS)}")
    run = _set_up(job, step, cfg, heldout, tokenizer)
    try:
        log = _train(run, progress)
    finally:
        run.engine.close()
    changed = changed_tensors(run)
    check_learned(log.curve, run.model.cfg.vocab)
    return _commit(run, log, changed, matmul_peak, labels)


def _perf(train_seconds, total_seconds, tokens, flops, matmul_peak) -> dict:
    perf = {"train_seconds": round(train_seconds, 4), "total_seconds": round(total_seconds, 4),
            "tokens": tokens, "tokens_per_s": round(tokens / max(train_seconds, 1e-9), 1),
            "model_flops_per_s": round(flops / max(train_seconds, 1e-9), 1),
            "blas_threads": BLAS_THREADS}
    if matmul_peak is None:
        matmul_peak = measure_matmul_peak()
    if matmul_peak:
        perf["matmul_peak_flops_per_s"] = round(matmul_peak, 1)
        perf["mfu"] = round(perf["model_flops_per_s"] / matmul_peak, 4)
    return perf


def run_failed(job: Job, err: Exception, step: StepConfig) -> None:
    """Record a failed attempt beside (never over) the previous good outputs."""
    outputs.write_failure(job.out_dir, {"job": job.job, "state": "failed", "reason": str(err),
                                        "lr": step.lr, "outer": step.outer, "inner": step.inner,
                                        "step": step_record(step)})
