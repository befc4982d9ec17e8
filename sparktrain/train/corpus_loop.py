"""STEP on a corpus: seeded windows of seq_len + 1 tokens from the prepared train
stream, any optimizer and schedule, held-out loss and bits per byte after every
outer pass, resumable from an intermediate state to the same final bytes.

The rules of the pairs loop hold: nothing is claimed unless every loss and
gradient stayed finite, some weight changed, the loss fell, and the held-out
loss ends below the uniform guess ln(vocab).
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sparktrain.data.bpb import bits_per_byte
from sparktrain.data.prepare import Prepared, read_prepared
from sparktrain.data.stream import WindowSampler, stream_batches, windows_batch
from sparktrain.data.tokenizer import load_tokenizer
from sparktrain.errors import SparkError, TrainingFailed
from sparktrain.fsutil import canonical_json, read_input, sha256_bytes
from sparktrain.model.base import Model
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig
from sparktrain.model.parallel import GradientEngine
from sparktrain.model.weights import weights_bytes
from sparktrain.train import outputs
from sparktrain.train.config import StepConfig
from sparktrain.train.job import Job
from sparktrain.train.loop import (EMBED, StepResult, _finite_or_fail, _progress,
                                   apply_update, commit_step, initial_params, resolve_step_n,
                                   run_record)
from sparktrain.train.optim import make_optimizer

LOSS_BATCH = 16           # windows per forward when measuring a whole-stream loss
PROBE_WINDOWS = 32        # fixed train windows: the curve's training loss
HELDOUT_WINDOWS = 64      # fixed held-out windows: the curve's held-out loss and bpb
# "No better than uniform": the held-out loss must end at least 1% below ln(vocab),
# the loss of a model that learned nothing (a fresh init sits just under it).
UNIFORM_MARGIN = 0.99
RESUME_JSON, RESUME_TENSORS = outputs.RESUME_FILES


@dataclass
class _Run:
    job: Job
    step: StepConfig
    model: Model
    engine: GradientEngine  # loss_and_grads over step.shards fixed shards, as the pairs loop
    tokenizer: object
    tokenizer_sha256: str
    data: Prepared
    params: dict
    base_step: int
    step_n: int
    trainable: list
    start: dict
    optimizer: object
    sampler: WindowSampler
    probe: list            # fixed train windows
    heldout_sample: list   # fixed held-out windows, measured after every pass
    heldout: list          # the whole held-out stream, each target once (at the end)
    byte_lengths: np.ndarray  # (V,) bytes of text per token id
    fingerprint: str       # what a resume state must match


@dataclass
class _Log:
    t0: float
    curve: list = field(default_factory=list)
    done: int = 0          # outer passes finished
    train_seconds: float = 0.0
    tokens_seen: int = 0
    flops_seen: int = 0
    clipped: int = 0


def _set_up(job: Job, step: StepConfig, cfg: ModelConfig) -> _Run:
    if not cfg.train_attn:
        raise SparkError("a corpus job needs the attention model (train_attn: true)")
    tok_path = job.out_dir / "tokenizer.json"
    tok_bytes = read_input(tok_path, "tokenizer.json (run the tokenizer stage)")
    tokenizer = load_tokenizer(tok_path)
    tok_sha = sha256_bytes(tok_bytes)
    data = read_prepared(job.out_dir / "corpus", tok_sha)
    cfg = dataclasses.replace(cfg, vocab=tokenizer.vocab).validate()
    model = build_model(cfg)
    salt = bytes.fromhex(job.sparkbc_sha256) if job.sparkbc_sha256 else b""
    params, base_step = initial_params(job, model, step.seed, salt)
    trainable = [n for n in params if step.train_embed or n != EMBED]
    sampler = WindowSampler(data.train, cfg.seq_len, step.batch_size, step.seed)
    fingerprint = sha256_bytes(canonical_json({
        "job": job.job, "arch": cfg.to_dict(),  # workers never change the bytes
        "step": {k: v for k, v in dataclasses.asdict(step).items() if k != "workers"},
        "tokenizer_sha256": tok_sha, "corpus_sha256": data.manifest["sha256"],
        "sparkbc_sha256": job.sparkbc_sha256, "base": job.base}).encode())
    return _Run(job=job, step=step, model=model,
                engine=GradientEngine(model, step.shards, step.workers),
                tokenizer=tokenizer, tokenizer_sha256=tok_sha,
                data=data, params=params, base_step=base_step,
                step_n=resolve_step_n(step.step, base_step, job.base), trainable=trainable,
                start={n: params[n].copy() for n in trainable},
                optimizer=make_optimizer(step, params, trainable), sampler=sampler,
                probe=spread_windows(data.train, cfg.seq_len, PROBE_WINDOWS),
                heldout_sample=spread_windows(data.val, cfg.seq_len, HELDOUT_WINDOWS),
                byte_lengths=tokenizer.byte_lengths(),
                heldout=list(stream_batches(data.val, cfg.seq_len, LOSS_BATCH, tokenizer.eos)),
                fingerprint=fingerprint)


def spread_windows(stream, seq_len: int, n: int) -> list:
    """n windows spread evenly over a stream: a fixed sample whose loss is
    comparable pass to pass (the whole stream would cost an epoch)."""
    last = len(stream) - seq_len - 1
    starts = np.unique(np.linspace(0, max(last, 0), n).astype(np.int64))
    return [windows_batch(stream, starts[i:i + LOSS_BATCH], seq_len)
            for i in range(0, len(starts), LOSS_BATCH)]


def stream_loss(engine: GradientEngine, params, batches: list,
                byte_lengths) -> tuple[float, int, int]:
    """(summed nats, counted targets, bytes of text those targets stand for); each
    batch whole on one worker, summed in order: the same with any worker count."""
    total, count, nbytes = 0.0, 0, 0
    for batch, (s, c) in zip(batches, engine.batch_losses(params, batches)):
        total += s
        count += c
        nbytes += int(byte_lengths[batch.targets[batch.mask > 0]].sum())
    return total, count, nbytes


def _measure(run: _Run, k: int, phase: str) -> dict:
    probe_sum, probe_n, _ = stream_loss(run.engine, run.params, run.probe, run.byte_lengths)
    held_sum, held_n, held_bytes = stream_loss(run.engine, run.params, run.heldout_sample,
                                               run.byte_lengths)
    entry = {"outer": k, "loss": probe_sum / probe_n, "heldout_loss": held_sum / held_n,
             "heldout_bpb": bits_per_byte(held_sum, held_bytes), "phase": phase}
    for key in ("loss", "heldout_loss"):
        _finite_or_fail(entry[key], key, f"after outer {k}")
    return entry


def heldout_score(run: _Run) -> dict:
    """The whole held-out stream: every target once, bits per byte of the original text."""
    total, count, nbytes = stream_loss(run.engine, run.params, run.heldout, run.byte_lengths)
    if nbytes != run.data.heldout_bytes:
        raise SparkError(f"held-out tokens stand for {nbytes} bytes, the corpus has "
                         f"{run.data.heldout_bytes}; run the prepare stage again")
    _finite_or_fail(total, "held-out loss", "at the end")
    return {"heldout_loss": total / count, "heldout_bpb": bits_per_byte(total, nbytes),
            "heldout_targets": count}


def _micro_step(run: _Run, log: _Log, t: int, where: str) -> None:
    apply_update(run, log, run.sampler.next(), where, t)


def _train(run: _Run, log: _Log, progress) -> None:
    step, job = run.step, run.job
    if not log.curve:
        log.curve.append(_measure(run, 0, "start"))
    progress(f"[{job.job}] {'resumed after outer ' + str(log.done) if log.done else 'start'}  "
             f"held-out {log.curve[-1]['heldout_bpb']:.3f} bpb  "
             f"{run.data.manifest['train_tokens']:,} train tokens, {run.model.n_params:,} "
             f"params, {step.outer}x{step.inner} micro-steps of {step.batch_size}")
    t_start, first = time.perf_counter(), log.done
    for k in range(log.done + 1, step.outer + 1):
        for i in range(step.inner):
            _micro_step(run, log, (k - 1) * step.inner + i, f"at outer {k} micro-step {i + 1}")
        log.curve.append(_measure(run, k, "after_outer"))
        log.done = k
        if step.checkpoint_every and k % step.checkpoint_every == 0 and k < step.outer:
            save_resume(run, log)
        eta = (time.perf_counter() - t_start) / (k - first) * (step.outer - k)
        e = log.curve[-1]
        progress(f"[{job.job}] outer {k}/{step.outer}  loss {e['loss']:.4f}  held-out "
                 f"{e['heldout_loss']:.4f} ({e['heldout_bpb']:.3f} bpb)  "
                 f"{log.tokens_seen / max(log.train_seconds, 1e-9):,.0f} tok/s  "
                 f"{time.perf_counter() - log.t0:.0f}s, ~{eta:.0f}s left")


# ------------------------------------------------------------------ resume

def save_resume(run: _Run, log: _Log) -> None:
    """The whole state after pass `log.done`, through the commit journal: a kill at
    any moment leaves the previous state or this one, never half of each."""
    tensors = {f"param.{n}": a for n, a in run.params.items()}
    tensors.update({f"opt.{n}": a for n, a in run.optimizer.state().items()})
    state = {"fingerprint": run.fingerprint, "done": log.done, "curve": log.curve,
             "tokens_seen": log.tokens_seen, "clipped": log.clipped,
             "flops_seen": log.flops_seen, "sampler": run.sampler.state()}
    outputs.commit_files(run.job.out_dir, {
        RESUME_TENSORS: weights_bytes(tensors, {"resume_of": run.job.job}),
        RESUME_JSON: canonical_json(state).encode()})


def load_resume(run: _Run, log: _Log, progress) -> None:
    """Continue from a saved state of this very run; another run's state is ignored."""
    from sparktrain.model.weights import load_weights

    folder = run.job.out_dir
    outputs.recover(folder)
    path = folder / RESUME_JSON
    if not path.is_file() or not (folder / RESUME_TENSORS).is_file():
        return
    try:
        state = json.loads(path.read_bytes())
    except ValueError:
        return
    if state.get("fingerprint") != run.fingerprint:
        progress(f"[{run.job.job}] {path} is the state of another run; starting afresh")
        return
    tensors, _ = load_weights(folder / RESUME_TENSORS)
    for n in run.params:
        run.params[n][...] = tensors[f"param.{n}"]
    run.optimizer.load_state({k[4:]: v for k, v in tensors.items() if k.startswith("opt.")})
    run.sampler.set_state(state["sampler"])
    log.curve, log.done = state["curve"], state["done"]
    log.tokens_seen, log.clipped, log.flops_seen = (state["tokens_seen"], state["clipped"],
                                                    state["flops_seen"])


def clear_resume(folder: Path) -> None:
    for name in (RESUME_JSON, RESUME_TENSORS):
        (folder / name).unlink(missing_ok=True)


# ------------------------------------------------------------- the claims

def check_learned(run: _Run, log: _Log, score: dict) -> list:
    first, last = log.curve[0], log.curve[-1]
    changed = [n for n in run.trainable if not np.array_equal(run.start[n], run.params[n])]
    if not changed:
        raise TrainingFailed("no weight changed during training; nothing to claim")
    if not last["loss"] < first["loss"]:
        raise TrainingFailed(f"loss did not fall: loss_after {last['loss']:.6f} >= loss_before "
                             f"{first['loss']:.6f}; previous outputs kept (try another step.lr)")
    uniform = math.log(run.model.cfg.vocab)
    if not score["heldout_loss"] < UNIFORM_MARGIN * uniform:
        raise TrainingFailed(f"held-out loss {score['heldout_loss']:.4f} is no better than the "
                             f"uniform guess ln({run.model.cfg.vocab}) = {uniform:.4f}; "
                             f"previous outputs kept")
    return changed


def _checkpoint(run: _Run, log: _Log, score: dict, changed, weights_sha256: str) -> dict:
    m = run.data.manifest
    return {
        **run_record(run, log, changed, weights_sha256),
        "dataset_sha256": m["sha256"], "dataset_kind": "corpus",
        "corpus": {k: m[k] for k in ("patterns", "heldout_fraction", "train_files",
                                     "heldout_files", "train_bytes", "heldout_bytes",
                                     "train_tokens", "heldout_tokens")},
        "tokenizer": run.tokenizer.kind, "tokenizer_sha256": run.tokenizer_sha256,
        **score,
        "heldout_baselines": m["heldout_baselines"],
    }


def run_corpus_step(job: Job, step: StepConfig, cfg: ModelConfig, *, progress=_progress,
                    matmul_peak=None) -> StepResult:
    """Train a corpus job (resuming a saved state of the same run) and commit its outputs."""
    run = _set_up(job, step, cfg)
    log = _Log(t0=time.perf_counter())
    try:
        load_resume(run, log, progress)
        _train(run, log, progress)
        score = heldout_score(run)
    finally:
        run.engine.close()
    changed = check_learned(run, log, score)
    last = log.curve[-1]
    meta = {"job": job.job, "step_n": run.step_n, "trained": True, "not_sgd": False,
            "arch": run.model.cfg.to_dict(), "loss_before": log.curve[0]["loss"],
            "loss_after": last["loss"], "sparkbc_sha256": job.sparkbc_sha256,
            "dataset_sha256": run.data.manifest["sha256"], "base": job.base,
            "tokenizer_sha256": run.tokenizer_sha256}
    return commit_step(run, log, meta, matmul_peak,
                       lambda wsha: _checkpoint(run, log, score, changed, wsha),
                       after_commit=lambda: clear_resume(job.out_dir))
