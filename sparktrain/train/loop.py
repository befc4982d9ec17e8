"""STEP: outer x inner minibatch SGD over a job's dataset, honest about the result.

The loop only claims what happened: the whole-dataset loss is measured before
and after each outer pass, and outputs saying `trained=true` are committed
only when gradients were applied, every loss and gradient stayed finite, some
weight changed and the loss fell. Anything else raises TrainingFailed and
leaves the previous outputs untouched.
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from sparktrain import BLAS_THREADS
from sparktrain.errors import SparkError, TrainingFailed
from sparktrain.fsutil import canonical_json, sha256_bytes
from sparktrain.model.config import ModelConfig, flops_per_token, n_params
from sparktrain.model.weights import check_params, config_from_meta, load_weights, weights_bytes
from sparktrain.train import outputs
from sparktrain.train.config import StepConfig
from sparktrain.train.data import Dataset, iter_batches, load_dataset, pool_batch, token_batch
from sparktrain.train.job import Job

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


def loss_batches(cfg: ModelConfig, dataset: Dataset) -> list:
    """The whole dataset in file order, padded once and reused for every measurement."""
    return list(iter_batches(dataset, LOSS_BATCH, pool=not cfg.train_attn))


def dataset_loss(params, cfg: ModelConfig, batches) -> float:
    from sparktrain.model.transformer import batch_loss

    total, count = 0.0, 0
    for batch in batches:
        s, c = batch_loss(params, cfg, batch)
        total += s
        count += c
    return total / max(count, 1)


def initial_params(job: Job, cfg: ModelConfig, seed: int, salt: bytes):
    """(params, base step_n): the base weights when `base` is a file, else fresh init."""
    from sparktrain.model.transformer import init_params

    if not job.base_is_weights:
        return init_params(cfg, seed, salt, dtype=np.float32), 0
    params, meta = load_weights(job.base)
    base_cfg = config_from_meta(meta, job.base)
    if base_cfg.train_attn != cfg.train_attn:
        raise SparkError(f"base {job.base} was trained with train_attn={base_cfg.train_attn}, "
                         f"this run has train_attn={cfg.train_attn}")
    check_params(params, cfg, job.base)
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


def check_knobs(step: StepConfig) -> None:
    """Knobs that parse as floats but cannot train (nan, inf) fail before any work."""
    for name in ("lr", "clip", "momentum"):
        value = getattr(step, name)
        if not math.isfinite(value):
            raise SparkError(f"step.{name} must be a finite number, got {value}")


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


def run_step(job: Job, step: StepConfig, cfg: ModelConfig, *, progress=_progress,
             matmul_peak=None) -> StepResult:
    """Train `job` and commit weights.safetensors + checkpoint.json + ARTIFACT."""
    from sparktrain.model.transformer import loss_and_grads

    step.validate()
    check_knobs(step)
    cfg.validate()
    salt = bytes.fromhex(job.sparkbc_sha256) if job.sparkbc_sha256 else b""
    dataset = load_dataset(job.dataset, cfg.seq_len)
    params, base_step = initial_params(job, cfg, step.seed, salt)
    step_n = resolve_step_n(step.step, base_step, job.base)
    trainable = [n for n in params if step.train_embed or n != EMBED]
    if not trainable:
        raise SparkError("nothing to train: train_embed=false freezes the only trained tensor")
    start = {n: params[n].copy() for n in trainable}
    velocity = {n: np.zeros_like(params[n]) for n in trainable}
    make_batch = pool_batch if not cfg.train_attn else token_batch
    full_batch = make_batch(dataset.encoded) if step.batch_size >= dataset.n else None
    sampler = MinibatchSampler(dataset.n, step.batch_size, step.seed)
    whole = loss_batches(cfg, dataset)
    outputs.lock_job(job.out_dir)  # the only writer of this job until the process exits

    t0 = time.perf_counter()
    loss_before = dataset_loss(params, cfg, whole)
    _finite_or_fail(loss_before, "loss_before", "at start")
    curve = [{"outer": 0, "loss": loss_before, "phase": "start"}]
    progress(f"[{job.job}] start  loss {loss_before:.4f}  {dataset.n} pairs, "
             f"{n_params(cfg):,} params, {step.outer}x{step.inner} micro-steps")
    train_seconds, tokens_seen, flops_seen, clipped = 0.0, 0, 0, 0
    for k in range(1, step.outer + 1):
        for i in range(step.inner):
            batch = full_batch if full_batch is not None else make_batch(
                [dataset.encoded[j] for j in sampler.next()])
            ts = time.perf_counter()
            loss, grads = loss_and_grads(params, cfg, batch)
            where = f"at outer {k} micro-step {i + 1}"
            _finite_or_fail(loss, "minibatch loss", where)
            norm = float(np.sqrt(sum(float(np.dot(g.ravel(), g.ravel()))
                                     for n, g in grads.items() if n in velocity)))
            _finite_or_fail(norm, "gradient norm", where)
            scale = 1.0
            if step.clip > 0 and norm > step.clip:
                scale, clipped = step.clip / norm, clipped + 1
            for n in trainable:
                v = velocity[n]
                v *= step.momentum
                v += grads[n] * np.float32(scale)
                params[n] -= np.float32(step.lr) * v
            train_seconds += time.perf_counter() - ts
            tokens = _batch_tokens(batch)
            tokens_seen += tokens
            flops_seen += tokens * flops_per_token(cfg, _batch_len(batch))
        loss_k = dataset_loss(params, cfg, whole)
        _finite_or_fail(loss_k, "dataset loss", f"after outer {k}")
        curve.append({"outer": k, "loss": loss_k, "phase": "after_outer"})
        elapsed = time.perf_counter() - t0
        progress(f"[{job.job}] outer {k}/{step.outer}  loss {loss_k:.4f}  "
                 f"{tokens_seen / max(train_seconds, 1e-9):,.0f} tok/s  {elapsed:.1f}s")

    loss_after = curve[-1]["loss"]
    changed = [n for n in trainable if not np.array_equal(start[n], params[n])]
    if not changed:
        raise TrainingFailed("no weight changed during training; nothing to claim")
    check_learned(curve, cfg.vocab)

    arch = cfg.to_dict()
    meta = {"job": job.job, "step_n": step_n, "trained": True, "not_sgd": False, "arch": arch,
            "loss_before": loss_before, "loss_after": loss_after,
            "sparkbc_sha256": job.sparkbc_sha256, "dataset_sha256": dataset.sha256,
            "base": job.base}
    wbytes = weights_bytes(params, meta)
    wsha = sha256_bytes(wbytes)
    checkpoint = {
        "job": job.job, "step_n": step_n, "loss_before": loss_before, "loss_after": loss_after,
        "loss_curve": curve, "outer": step.outer, "inner": step.inner, "lr": step.lr,
        "batch_size": step.batch_size, "seed": step.seed, "clip": step.clip,
        "momentum": step.momentum, "train_attn": cfg.train_attn, "train_embed": step.train_embed,
        "dataset": job.dataset, "dataset_sha256": dataset.sha256, "dataset_n": dataset.n,
        "dataset_tokens": dataset.n_tokens, "truncated": dataset.n_truncated, "arch": arch,
        "n_params": n_params(cfg), "trained_tensors": len(changed),
        "frozen_tensors": ",".join(sorted(set(params) - set(trainable))),
        "micro_steps": step.outer * step.inner, "clipped_steps": clipped,
        "tokens_seen": tokens_seen, "weights": job.rel("weights.safetensors"),
        "weights_sha256": wsha, "sparkbc_sha256": job.sparkbc_sha256, "program": job.program,
        "method": job.method, "base": job.base, "base_step_n": base_step,
        "blas_threads": BLAS_THREADS, "trained": True, "not_sgd": False, "sgd": True,
        "claim": False, "device": "cpu",
    }
    files = {"weights.safetensors": wbytes,
             "checkpoint.json": canonical_json(checkpoint).encode(),
             "ARTIFACT": outputs.sgd_artifact(job, step_n).encode()}
    outputs.commit_files(job.out_dir, files)
    outputs.clear_failure(job.out_dir)
    perf = _perf(cfg, train_seconds, time.perf_counter() - t0, tokens_seen, flops_seen,
                 matmul_peak)
    outputs.atomic_write_bytes(job.out_dir / "perf.json", canonical_json(perf).encode())
    return StepResult(checkpoint=checkpoint, perf=perf, weights_sha256=wsha, files=files)


def _batch_tokens(batch) -> int:
    mask = getattr(batch, "context_mask", None)
    if mask is not None:
        return int(mask.sum())
    # input positions that are real tokens: everything up to each row's last counted target
    m = batch.mask
    last = m.shape[1] - np.argmax(m[:, ::-1] > 0, axis=1)
    return int(np.where(m.any(axis=1), last, 0).sum())


def _batch_len(batch) -> int:
    arr = getattr(batch, "inputs", None)
    if arr is None:
        arr = batch.context
    return int(arr.shape[1])


def _perf(cfg, train_seconds, total_seconds, tokens, flops, matmul_peak) -> dict:
    perf = {"train_seconds": round(train_seconds, 4), "total_seconds": round(total_seconds, 4),
            "tokens": tokens, "tokens_per_s": round(tokens / max(train_seconds, 1e-9), 1),
            "model_flops_per_s": round(flops / max(train_seconds, 1e-9), 1),
            "blas_threads": BLAS_THREADS}
    if matmul_peak is None:
        from sparktrain.model.bench import matmul_peak as measure_peak
        matmul_peak = measure_peak()
    if matmul_peak:
        perf["matmul_peak_flops_per_s"] = round(matmul_peak, 1)
        perf["mfu"] = round(perf["model_flops_per_s"] / matmul_peak, 4)
    return perf


def run_failed(job: Job, err: Exception, step: StepConfig) -> None:
    """Record a failed attempt beside (never over) the previous good outputs."""
    outputs.write_failure(job.out_dir, {"job": job.job, "state": "failed", "reason": str(err),
                                        "lr": step.lr, "outer": step.outer, "inner": step.inner})
