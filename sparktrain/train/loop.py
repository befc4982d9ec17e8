"""STEP: the one training loop, over any data source (docs/training.md "The loop").

Outer passes of inner micro-steps. The data source (data/source.py) gives the
seeded micro-batches and the fixed sets measured after every pass; the loop
never asks which kind of data it has. It only claims what happened: outputs
saying `trained=true` are committed only when gradients were applied, every
loss and gradient stayed finite, some weight changed and the loss fell
(check_learned). Anything else raises TrainingFailed and leaves the previous
outputs untouched. With step.checkpoint_every the whole state is saved between
passes, and a run killed mid-way resumes to the same final bytes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from sparktrain import BLAS_KERNEL, kernel
from sparktrain.blas import live_threads
from sparktrain.data.base import DataSource, TrainingData, score
from sparktrain.data.source import source_for
from sparktrain.data.tokenizer import job_tokenizer
from sparktrain.errors import SparkError, TrainingFailed
from sparktrain.fsutil import canonical_json, read_input, sha256_bytes
from sparktrain.gate import replace_owned_folder
from sparktrain.jobfiles import (ARTIFACT, CHECKPOINT, CORPUS, LIVE_DIR, LIVE_PENDING, PERF,
                                 RESUME_STATE, RESUME_TENSORS, WEIGHTS)
from sparktrain.model.base import Model
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig
from sparktrain.model.device import Device
from sparktrain.model.device import resolve as resolve_device
from sparktrain.model.memory import step_fits
from sparktrain.model.parallel import GradientEngine
from sparktrain.model.weights import (check_params, config_from_meta, load_weights,
                                      weights_bytes)
from sparktrain.params import Defaults, StepConfig, step_record
from sparktrain.progress import Progress
from sparktrain.safeload import load_json
from sparktrain.train import outputs
from sparktrain.train.bench import device_matmul_peak
from sparktrain.train.bench import matmul_peak as measure_matmul_peak
from sparktrain.train.job import Job
from sparktrain.train.live import PassLogger
from sparktrain.train.optim import clipped_update, lr_at, make_optimizer

EMBED = "spark.embed.weight"
LABELS = ("source", "command")  # free-text labels a run may record (spark apply-step)


@dataclass
class StepResult:
    checkpoint: dict
    perf: dict
    weights_sha256: str
    files: dict = field(default_factory=dict)


# ---------------------------------------------------------------- the claims

BLOWUP = 2.0          # an outer-pass loss above BLOWUP x the starting loss: the run blew up
UNIFORM_MARGIN = 0.99  # the loss must end below 99% of ln(vocab), the uniform guess


def _finite_or_fail(value: float, what: str, where: str) -> None:
    if not np.isfinite(value):
        raise TrainingFailed(f"{what} is {value} {where}; training diverged "
                             "(lower step.lr or set step.clip); previous outputs kept")


def check_learned(curve: list[dict], vocab: int) -> None:
    """What a run must show before `trained=true` may be claimed, for every data source.

    No outer pass blew up above BLOWUP x the starting loss; the training loss
    fell; and it ends at least 1% below ln(vocab), the loss of the uniform
    guess, which is where a fresh init sits and a diverged network collapses to.
    """
    loss_before, loss_after = curve[0]["loss"], curve[-1]["loss"]
    for point in curve[1:]:
        if point["loss"] > BLOWUP * loss_before:
            raise TrainingFailed(f"loss blew up to {point['loss']:.4f} after outer "
                                 f"{point['outer']} (start {loss_before:.4f}); training diverged "
                                 "(lower step.lr or set step.clip); previous outputs kept")
    if not loss_after < loss_before:
        raise TrainingFailed(f"loss did not fall: loss_after {loss_after:.6f} >= loss_before "
                             f"{loss_before:.6f}; previous outputs kept (try another step.lr)")
    uniform = math.log(vocab)
    if not loss_after < UNIFORM_MARGIN * uniform:
        raise TrainingFailed(f"loss_after {loss_after:.4f} is no better than the uniform "
                             f"distribution (ln {vocab} = {uniform:.4f}); the run learned "
                             "nothing (lower step.lr?); previous outputs kept")


def changed_tensors(run: "_Run") -> list[str]:
    """The names of the trained tensors that changed; TrainingFailed if none did."""
    now = run.host_params()
    changed = [n for n in run.trainable if not np.array_equal(run.start[n], now[n])]
    if not changed:
        raise TrainingFailed("no weight changed during training; nothing to claim")
    return changed


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_progress.to_stderr = True   # a writer to stderr: the loop may draw its bar there instead


def _bar_stream(progress):
    """Where the loop draws its bar: stderr, when `progress` is a writer to stderr
    (it says so with a true `to_stderr`, as _progress and cli/report.py's
    lines_after do) and stderr is a terminal. Else None: the loop prints its plain
    lines through `progress`, so a caller's own callable always gets lines.
    See docs/training.md ("Progress")."""
    stream = sys.stderr
    if getattr(progress, "to_stderr", False) and stream is not None and stream.isatty():
        return stream
    return None


def _micro_bar(progress, job_id: str, step: StepConfig, done: int) -> Progress | None:
    """The loop's bar on a terminal, over the run's micro-steps (outer x inner),
    `done` passes already behind it: its ETA counts only this process's work."""
    stream = _bar_stream(progress)
    if stream is None:
        return None
    return Progress(f"[{job_id}] outer {min(done + 1, step.outer)}/{step.outer}",
                    total=step.outer * step.inner, done=done * step.inner, unit="micro-steps",
                    stream=stream, tty=True)


# ------------------------------------------------------------------ set-up

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


@dataclass
class _Run:
    """Everything the loop reads, and the state it updates."""
    job: Job
    step: StepConfig
    model: Model
    data: TrainingData
    params: dict                   # on the run's device (numpy arrays on the CPU)
    base_step: int
    step_n: int
    trainable: list[str]
    start: dict[str, np.ndarray]   # trainable tensors before training (host)
    optimizer: object              # train/optim.py: SGD or AdamW, keyed like params
    engine: GradientEngine         # loss_and_grads over step.shards fixed shards
    fingerprint: str               # what a resume state must match
    device: Device = field(default=None)  # model/device.py: where params and state live

    def host_params(self) -> dict[str, np.ndarray]:
        return self.device.to_host(self.params)


def _set_up(job: Job, step: StepConfig, cfg: ModelConfig, source: DataSource,
            progress) -> _Run:
    if job.out_dir.is_dir():  # held from before the base is read: no lost update
        outputs.lock_job(job.out_dir)
    device = resolve_device(step.device)  # a missing GPU is one line before any work
    tokenizer, tokenizer_sha256 = job_tokenizer(job.out_dir)
    cfg = dataclasses.replace(cfg, vocab=tokenizer.vocab).validate()  # the tokenizer's vocab
    # refused from the shapes before anything large is allocated (model/memory.py)
    step_fits("training", cfg, step, source.row_bound(), loss_rows=source.loss_rows)
    model = build_model(cfg)
    data = source.training_data(job.out_dir / CORPUS, model, tokenizer, tokenizer_sha256, step)
    salt = bytes.fromhex(job.sparkbc_sha256) if job.sparkbc_sha256 else b""
    params, base_step = initial_params(job, model, step.seed, salt)
    trainable = [n for n in params if step.train_embed or n != EMBED]
    if not trainable:
        raise SparkError("nothing to train: train_embed=false freezes the only trained tensor")
    ran_on = {} if device.kind == "cpu" else {"device": device.name}  # cpu: as before
    fingerprint = sha256_bytes(canonical_json({
        "job": job.id, "arch": cfg.to_dict(), "data": data.fingerprint,
        "step": {k: v for k, v in dataclasses.asdict(step).items()
                 if k not in ("workers", "device")},
        "sparkbc_sha256": job.sparkbc_sha256, "base": job.base, **ran_on}).encode())
    start = {n: params[n].copy() for n in trainable}
    if device.note:
        progress(f"[{job.id}] {device.note}")
    if device.kind == "cpu" and BLAS_KERNEL.source != "preloaded":  # preloaded: said at import
        if line := kernel.note(BLAS_KERNEL):  # a CPU off the portable family says which
            progress(f"[{job.id}] {line}")
    params = device.to_device(params)  # once: the optimizer's state is made beside them
    run = _Run(job=job, step=step, model=model, data=data, params=params, base_step=base_step,
               step_n=resolve_step_n(step.step_n, base_step, job.base), trainable=trainable,
               start=start, optimizer=make_optimizer(step, params, trainable),
               engine=GradientEngine(model, step.shards, step.workers), fingerprint=fingerprint,
               device=device)
    outputs.lock_job(job.out_dir)  # the only writer of this job until the process exits
    return run


# ---------------------------------------------------------------- the loop

@dataclass
class _Log:
    """What the loop did: the loss curve and the counters of checkpoint and perf."""
    t0: float
    curve: list[dict] = field(default_factory=list)
    done: int = 0              # outer passes finished (also those of a resumed state)
    train_seconds: float = 0.0
    tokens_seen: int = 0
    flops_seen: int = 0
    clipped: int = 0
    # this process only, so a resumed run's speed and ETA are its own
    run_seconds: float = 0.0
    run_tokens: int = 0


def _point(run: _Run, outer: int, phase: str) -> dict:
    """A loss_curve entry: the training set's loss, and the held-out set's (with its
    bits per byte when the source knows the bytes) at the same moment."""
    data, params = run.data, run.params
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


def apply_update(run: _Run, log: _Log, batch, where: str, t: int) -> None:
    """Gradients of `batch`, global-norm clipping, the optimizer's update at
    micro-step `t`, timed and counted in `log`."""
    step, params = run.step, run.params
    ts = time.perf_counter()
    loss, grads = run.engine.loss_and_grads(params, batch)
    _finite_or_fail(loss, "minibatch loss", where)
    _, scale = clipped_update(run.optimizer, step, params, grads, run.trainable, t,
                              step.outer * step.inner,
                              check=lambda norm: _finite_or_fail(norm, "gradient norm", where))
    log.clipped += scale != 1.0
    seconds = time.perf_counter() - ts
    log.train_seconds += seconds
    log.run_seconds += seconds
    log.tokens_seen += batch.n_tokens
    log.run_tokens += batch.n_tokens
    log.flops_seen += batch.n_tokens * run.model.flops_per_token(batch.width)


def _train(run: _Run, log: _Log, progress) -> None:
    """Outer passes of inner micro-steps, the curve point after each; each point
    also goes to DVCLive (train/live.py) and to one progress line. On a terminal
    a bar over the micro-steps runs below those lines (_micro_bar)."""
    step, job = run.step, run.job
    resumed = bool(log.curve)
    if not resumed:
        log.curve.append(_point(run, 0, "start"))
    progress(f"[{job.id}] {'resumed after outer ' + str(log.done) if log.done else 'start'}  "
             f"{_losses(log.curve[-1])}  {run.data.describe}, {run.model.n_params:,} params, "
             f"{step.outer}x{step.inner} micro-steps of {step.batch_size}")
    total = step.outer * step.inner
    bar = _micro_bar(progress, job.id, step, log.done)
    say = progress if bar is None else bar.log
    # progress lines and the bar are the loop's own (below): the logger only feeds DVCLive
    # DVCLive writes beside the job's files and its folder replaces dvclive/ with the
    # commit: a failed run leaves the last good curves as they were
    # (the bar is entered first, so it is closed whatever happens after it started)
    with bar or contextlib.nullcontext(), \
            PassLogger(job.out_dir / LIVE_PENDING, total=step.outer + 1,
                       start_outer=len(log.curve) - resumed, display=False) as passes:
        if not resumed:
            passes.log_pass({**log.curve[0], "lr": lr_at(step, 0, total)})
        t_start, first = time.perf_counter(), log.done
        for k in range(log.done + 1, step.outer + 1):
            if bar is not None:
                bar.describe(f"[{job.id}] outer {k}/{step.outer}")
            for i in range(step.inner):
                apply_update(run, log, run.data.sampler.next(),
                             f"at outer {k} micro-step {i + 1}", (k - 1) * step.inner + i)
                if bar is not None:
                    bar.advance(note=f"{_losses(log.curve[-1])}  "
                                     f"{log.run_tokens / max(log.run_seconds, 1e-9):,.0f} tok/s")
            log.curve.append(_point(run, k, "after_outer"))
            log.done = k
            if step.checkpoint_every and k % step.checkpoint_every == 0 and k < step.outer:
                save_resume(run, log)
            now = time.perf_counter()
            rate = log.run_tokens / max(log.run_seconds, 1e-9)
            # tokens/s stays out of DVCLive: its files are DVC outputs, the same every run
            passes.log_pass({**log.curve[-1], "lr": lr_at(step, k * step.inner - 1, total)})
            eta = (now - t_start) / (k - first) * (step.outer - k)
            say(f"[{job.id}] outer {k}/{step.outer}  {_losses(log.curve[-1])}  "
                f"{rate:,.0f} tok/s  {now - log.t0:.1f}s, ~{eta:.0f}s left")


def _losses(point: dict) -> str:
    text = f"loss {point['loss']:.4f}"
    if "heldout_loss" in point:
        text += f"  held-out {point['heldout_loss']:.4f}"
    if "heldout_bpb" in point:
        text += f" ({point['heldout_bpb']:.3f} bpb)"
    return text


@contextlib.contextmanager
def out_of_memory_is_one_line(run: _Run):
    """A GPU that runs out of memory mid-run: TrainingFailed (exit 1) naming the
    shape and batch that did not fit; the earlier outputs stay as they were."""
    try:
        yield
    except Exception as err:
        if run.device.kind == "cpu" or not _is_out_of_memory(err):
            raise
        c = run.model.cfg
        raise TrainingFailed(
            f"{run.device.name} ran out of memory: dim {c.dim}, n_layer {c.n_layer}, seq_len "
            f"{c.seq_len}, vocab {c.vocab} with batch_size {run.step.batch_size} did not fit "
            "(lower step.batch_size, raise step.shards or take a smaller scale); previous "
            "outputs kept") from None


def _is_out_of_memory(err: BaseException) -> bool:
    """PyTorch's OutOfMemoryError (CUDA), or its RuntimeError of MPS / older releases."""
    return (type(err).__name__ == "OutOfMemoryError"
            or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower()))


# ------------------------------------------------------------------ resume

def save_resume(run: _Run, log: _Log) -> None:
    """The whole state after pass `log.done`, through the commit journal: a kill at
    any moment leaves the previous state or this one, never half of each."""
    tensors = {f"param.{n}": a for n, a in run.host_params().items()}
    opt_state = run.device.to_host(run.optimizer.state())
    tensors.update({f"opt.{n}": a for n, a in opt_state.items()})
    state = {"fingerprint": run.fingerprint, "done": log.done, "curve": log.curve,
             "tokens_seen": log.tokens_seen, "clipped": log.clipped,
             "flops_seen": log.flops_seen, "sampler": run.data.sampler.state()}
    outputs.commit_files(run.job.out_dir, {
        RESUME_TENSORS: weights_bytes(tensors, {"resume_of": run.job.id}),
        RESUME_STATE: canonical_json(state).encode()})


def load_resume(run: _Run, log: _Log, progress) -> None:
    """Continue from a saved state of this very run; another run's state is ignored."""
    folder = run.job.out_dir
    outputs.recover(folder)
    path = folder / RESUME_STATE
    if not path.is_file() or not (folder / RESUME_TENSORS).is_file():
        return
    try:
        state = load_json(read_input(path, "job file"), os.fspath(path))
    except SparkError:
        return
    if not isinstance(state, dict) or state.get("fingerprint") != run.fingerprint:
        progress(f"[{run.job.id}] {path} is the state of another run; starting afresh")
        return
    tensors, _ = load_weights(folder / RESUME_TENSORS)
    ops = run.device.ops
    for n in run.params:  # host float32 in the file, whatever device saved it
        run.params[n] = ops.load(run.params[n], tensors[f"param.{n}"])
    run.optimizer.load_state({k[4:]: v for k, v in tensors.items() if k.startswith("opt.")})
    run.data.sampler.set_state(state["sampler"])
    log.curve, log.done = state["curve"], state["done"]
    log.tokens_seen, log.clipped, log.flops_seen = (state["tokens_seen"], state["clipped"],
                                                    state["flops_seen"])


def clear_resume(folder) -> None:
    for name in (RESUME_STATE, RESUME_TENSORS):
        (folder / name).unlink(missing_ok=True)


def _publish_curves(folder) -> None:
    """The committed run's DVCLive folder becomes the job's dvclive/."""
    pending, live = folder / LIVE_PENDING / LIVE_DIR, folder / LIVE_DIR
    if pending.is_dir():
        replace_owned_folder(pending, live)  # never a link or a file it did not make
    shutil.rmtree(folder / LIVE_PENDING, ignore_errors=True)


# -------------------------------------------------------------- the record

def _weights_meta(run: _Run, log: _Log, labels: dict) -> dict:
    job = run.job
    return {"job": job.id, "step_n": run.step_n, "trained": True, "not_sgd": False,
            "arch": run.model.cfg.to_dict(), "loss_before": log.curve[0]["loss"],
            "loss_after": log.curve[-1]["loss"], "sparkbc_sha256": job.sparkbc_sha256,
            "base": job.base, **run.data.weights_meta, **labels,
            # absent means the CPU: the default job's weights bytes are as before
            **({} if run.device.kind == "cpu" else {"device": run.device.name})}


def _checkpoint(run: _Run, log: _Log, changed: list[str], weights_sha256: str,
                labels: dict) -> dict:
    """checkpoint.json: a contract (docs/outputs.md). Who ran, with which knobs,
    on which data, what changed; trained/not_sgd/sgd/claim are the original's
    fixed fields of a real SGD step."""
    job, step, cfg = run.job, run.step, run.model.cfg
    return {
        "job": job.id, "step_n": run.step_n, "loss_before": log.curve[0]["loss"],
        "loss_after": log.curve[-1]["loss"], "loss_curve": log.curve, **step_record(step),
        "train_attn": cfg.train_attn, "dataset": job.dataset,
        "arch": cfg.to_dict(), "n_params": run.model.n_params, "trained_tensors": len(changed),
        "frozen_tensors": ",".join(sorted(set(run.params) - set(run.trainable))),
        "micro_steps": step.outer * step.inner, "clipped_steps": log.clipped,
        "tokens_seen": log.tokens_seen, "weights": job.rel(WEIGHTS),
        "weights_sha256": weights_sha256, "sparkbc_sha256": job.sparkbc_sha256,
        "program": job.program, "method": job.method, "base": job.base,
        "base_step_n": run.base_step, "blas_threads": live_threads(), "trained": True,
        "not_sgd": False, "sgd": True, "claim": False, "device": run.device.name,
        # kernel family + numpy/BLAS versions: what repro-check names when a hash moves
        **({"made_with": kernel.made_with()} if run.device.kind == "cpu" else {}),
        **run.data.checkpoint, **labels,
    }


def _perf(log: _Log, run: _Run, matmul_peak) -> dict:
    seconds = max(log.run_seconds, 1e-9)
    perf = {"train_seconds": round(log.train_seconds, 4),
            "total_seconds": round(time.perf_counter() - log.t0, 4),
            "tokens": log.tokens_seen, "tokens_per_s": round(log.run_tokens / seconds, 1),
            "model_flops_per_s": round(log.flops_seen / max(log.train_seconds, 1e-9), 1),
            "blas_threads": live_threads(), "shards": run.engine.shards,
            "blas_kernel": kernel.made_with()["kernel"], "blas_kernel_source": BLAS_KERNEL.source,
            "workers": run.engine.workers if run.device.kind == "cpu" else 1,
            "device": run.device.name}
    if matmul_peak is None:
        matmul_peak = (measure_matmul_peak() if run.device.kind == "cpu"
                       else device_matmul_peak(run.device))
    if matmul_peak:
        perf["matmul_peak_flops_per_s"] = round(matmul_peak, 1)
        perf["mfu"] = round(perf["model_flops_per_s"] / matmul_peak, 4)
    return perf


def _commit(run: _Run, log: _Log, changed: list[str], matmul_peak, labels: dict) -> StepResult:
    """weights + checkpoint + ARTIFACT as one commit (the checkpoint names the
    weights' hash), then perf.json beside them, then the resume state goes."""
    job = run.job
    wbytes = weights_bytes(run.host_params(), _weights_meta(run, log, labels))
    wsha = sha256_bytes(wbytes)
    checkpoint = _checkpoint(run, log, changed, wsha, labels)
    files = {WEIGHTS: wbytes, CHECKPOINT: canonical_json(checkpoint).encode(),
             ARTIFACT: outputs.sgd_artifact(job, run.step_n).encode()}
    outputs.commit_files(job.out_dir, files)
    outputs.clear_failure(job.out_dir)
    clear_resume(job.out_dir)
    _publish_curves(job.out_dir)
    perf = _perf(log, run, matmul_peak)
    outputs.atomic_write_bytes(job.out_dir / PERF, canonical_json(perf).encode())
    return StepResult(checkpoint=checkpoint, perf=perf, weights_sha256=wsha, files=files)


# ------------------------------------------------------------------- entry

def run_step(job: Job, step: StepConfig, cfg: ModelConfig, source: DataSource | None = None,
             *, heldout: str | None = None, progress=_progress, matmul_peak=None,
             labels: dict | None = None) -> StepResult:
    """Train `job` on its data source (default: the one its dataset names, with
    `heldout` pairs measured after every pass) and commit weights.safetensors +
    checkpoint.json + ARTIFACT. `labels` (keys of LABELS) are recorded in the
    weights metadata and checkpoint. A saved state of this very run is resumed."""
    labels = dict(labels or {})
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise SparkError(f"unknown run labels {unknown}; known: {', '.join(LABELS)}")
    if source is None:
        source = source_for(job.dataset, Defaults(), heldout)
    run = _set_up(job, step, cfg, source, progress)
    log = _Log(t0=time.perf_counter())
    try:
        try:
            load_resume(run, log, progress)
            with out_of_memory_is_one_line(run):
                _train(run, log, progress)
        finally:
            run.engine.close()
        changed = changed_tensors(run)
        check_learned(log.curve, run.model.cfg.vocab)
        return _commit(run, log, changed, matmul_peak, labels)
    except BaseException:
        if not (job.out_dir / RESUME_STATE).is_file():  # nothing to resume: no curves either
            shutil.rmtree(job.out_dir / LIVE_PENDING, ignore_errors=True)
        raise


def run_failed(job: Job, err: Exception, step: StepConfig) -> None:
    """Record a failed attempt beside (never over) the previous good outputs."""
    outputs.write_failure(job.out_dir, {"job": job.id, "state": "failed", "reason": str(err),
                                        "lr": step.lr, "outer": step.outer, "inner": step.inner,
                                        "step": step_record(step)})
