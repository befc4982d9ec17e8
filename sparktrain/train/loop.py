"""STEP: the one loop, outer passes of inner micro-steps over any data source and device
(docs/training.md "Data sources and the one loop"), from a base, a fresh init or a saved state
of this very run (used whole, when its fingerprint is this run's); then the claims it must
show (`trained=true` only for what happened) and one commit, or failed.json (docs/outputs.md)."""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from sparktrain.runtime import live_threads
from sparktrain.data.base import DataSource, TrainingData, score
from sparktrain.data.tokenizer import job_tokenizer
from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.core.fsutil import canonical_json, read_input, sha256_bytes
from sparktrain.core.jobfiles import (ARTIFACT, CHECKPOINT, CORPUS, PERF, RESUME_STATE,
                                      RESUME_TENSORS, WEIGHTS)
from sparktrain.core.safeload import load_json
from sparktrain.model.base import Model
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig, step_fits
from sparktrain.model.backend import Device, resolve as resolve_device
from sparktrain.model.parallel import GradientEngine, quiet_nonfinite
from sparktrain.model.weights import check_params, config_from_meta, load_weights, weights_bytes
from sparktrain.params import StepConfig, step_record
from sparktrain.train import live, outputs
from sparktrain.train.job import Job
from sparktrain.train.optim import clipped_update, lr_at, make_optimizer

EMBED = "spark.embed.weight"
LABELS = ("source", "command")  # free-text labels a run may record (spark apply-step)


def _finite_or_fail(value: float, what: str, where: str) -> None:
    if not np.isfinite(value):
        raise TrainingFailed(f"{what} is {value} {where}; training diverged "
                             "(lower step.lr or set step.clip); previous outputs kept")


@dataclass
class _Run:
    """Everything the loop reads, and the state it updates."""
    job: Job
    step: StepConfig
    model: Model
    data: TrainingData
    device: Device                 # model/backend.py: where params and state live
    params: dict                   # on the run's device (numpy arrays on the CPU)
    base_step: int
    step_n: int
    trainable: list[str]
    start: dict[str, np.ndarray]   # trainable tensors before training (host)
    optimizer: object              # train/optim.py: SGD, AdamW or Muon, keyed like params
    fingerprint: str               # what a resume state must match (fingerprint)
    engine: GradientEngine = field(default=None)  # loss_and_grads over step.shards shards

    def host_params(self) -> dict[str, np.ndarray]:
        return self.device.to_host(self.params)


def _set_up(job: Job, step: StepConfig, cfg: ModelConfig, source: DataSource, say) -> _Run:
    if job.out_dir.is_dir():  # held from before the base is read: no lost update
        outputs.lock_job(job.out_dir)
    device = resolve_device(step.device)  # the CLI's Device (resolved once a process)
    inputs = outputs.inputs_dir(job.out_dir)  # the staged tokenizer and corpus, if prepared
    tokenizer, tokenizer_sha256 = job_tokenizer(inputs)
    cfg = dataclasses.replace(cfg, vocab=tokenizer.vocab).validate()
    # refused from the shapes before anything large is allocated
    step_fits("training", cfg, step, source.row_bound(), loss_rows=source.loss_rows)
    model = build_model(cfg)
    data = source.training_data(inputs / CORPUS, model, tokenizer, tokenizer_sha256, step)
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
    run = _Run(job=job, step=step, model=model, data=data, device=device, params=params,
               base_step=base_step, step_n=resolve_step_n(step.step_n, base_step, job.base),
               trainable=trainable, start=start, optimizer=make_optimizer(step, params, trainable),
               # made before the folder is locked, so its knobs are refused first
               engine=GradientEngine(model, step.shards, device.workers(step.workers)),
               fingerprint=fingerprint(job, cfg, data.fingerprint, step, device))
    outputs.lock_job(job.out_dir)  # the only writer of this job until the process exits
    return run


def _point(run: _Run, outer: int, phase: str) -> dict:
    """A loss_curve entry: the training set's loss, the held-out set's (and bpb if known)."""
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


def apply_update(run: _Run, log: Log, batch, where: str, t: int) -> None:
    """Gradients of `batch`, the clipped update at micro-step `t`, counted in `log`."""
    step, params = run.step, run.params
    ts = time.perf_counter()
    loss, grads = run.engine.loss_and_grads(params, batch)
    _finite_or_fail(loss, "minibatch loss", where)
    _, scale = clipped_update(run.optimizer, step, params, grads, run.trainable, t,
                              step.outer * step.inner,
                              check=lambda norm: _finite_or_fail(norm, "gradient norm", where))
    log.count(batch.n_tokens, batch.n_tokens * run.model.flops_per_token(batch.width),
              scale != 1.0, time.perf_counter() - ts)


def _train(run: _Run, log: Log, watch: live.Watcher) -> None:
    """Outer passes of inner micro-steps; the curve point after each to the watcher."""
    step = run.step
    total = step.outer * step.inner
    if not log.curve:
        log.curve.append(_point(run, 0, "start"))
    def lr_of(k: int) -> float:  # the lr logged with pass k's point
        return lr_at(step, max(k * step.inner - 1, 0), total)

    watch.start(log.curve[-1], lr_of(log.done), log.done,
                f"{run.data.describe}, {run.model.n_params:,} params, "
                f"{step.outer}x{step.inner} micro-steps of {step.batch_size}"
                + (f", stopped after outer {step.stop_after_pass}" if step.stop_after_pass else ""),
                earlier=[(p, lr_of(p["outer"])) for p in log.curve[:-1]])
    for k in range(log.done + 1, step.passes() + 1):  # stop_after_pass: fewer, same schedule
        for i in range(step.inner):
            apply_update(run, log, run.data.sampler.next(),
                         f"at outer {k} micro-step {i + 1}", (k - 1) * step.inner + i)
            watch.micro_step(k, log.rate())
        log.curve.append(_point(run, k, "after_outer"))
        log.done = k
        if step.checkpoint_every and k % step.checkpoint_every == 0 and k < step.passes():
            save_state(run, log)
        watch.pass_done(log.curve[-1], lr_at(step, k * step.inner - 1, total), log.rate())


@contextlib.contextmanager
def out_of_memory_is_one_line(run: _Run):
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


def run_step(job: Job, step: StepConfig, cfg: ModelConfig, source: DataSource, *,
             progress=None, labels: dict | None = None) -> StepResult:
    """Train `job` on `source` (resuming this very run) and commit its outputs; `progress`:
    the lines (default stderr), `labels` (LABELS' keys): recorded in weights and checkpoint."""
    labels = dict(labels or {})
    if unknown := sorted(set(labels) - set(LABELS)):
        raise SparkError(f"unknown run labels {unknown}; known: {', '.join(LABELS)}")
    watch = live.Watcher(job.id, job.out_dir, step.passes(), step.inner, progress)
    run = _set_up(job, step, cfg, source, watch.say)
    log = Log(t0=time.perf_counter())
    try:
        with run.engine:
            load_state(run, log, watch.say)
            with watch, out_of_memory_is_one_line(run):
                _train(run, log, watch)
        changed = changed_tensors(run)
        check_learned(log.curve, run.model.cfg.vocab)
        return commit(run, log, changed, labels)
    except BaseException:  # a resumed run rebuilds its curves from its state: none kept
        live.discard(job.out_dir)
        raise


def step_job(job, step, cfg, source, **run_kw):
    """One attempt at STEP: run_step, non-finite warnings off; TrainingFailed: failed.json."""
    with quiet_nonfinite():
        try:
            return run_step(job, step, cfg, source, **run_kw)
        except TrainingFailed as err:
            run_failed(job, err, step)
            raise


@dataclass
class StepResult:
    checkpoint: dict
    perf: dict
    weights_sha256: str
    files: dict = field(default_factory=dict)


@dataclass
class Log:
    """The loss curve and the run's counters (a resumed state's included); `seconds`
    and what was counted since `resumed` are this process's, so its speed is its own."""
    t0: float
    curve: list[dict] = field(default_factory=list)
    done: int = 0              # outer passes finished
    tokens_seen: int = 0
    flops_seen: int = 0
    clipped: int = 0
    seconds: float = 0.0       # in updates, this process
    before: tuple[int, int] = (0, 0)  # (tokens, flops) of the resumed state

    def resumed(self, curve: list[dict], done: int, tokens: int, clipped: int,
                flops: int) -> None:
        self.curve, self.done, self.clipped = curve, done, clipped
        self.tokens_seen, self.flops_seen, self.before = tokens, flops, (tokens, flops)

    def count(self, tokens: int, flops: int, clipped: bool, seconds: float) -> None:
        self.tokens_seen += tokens
        self.flops_seen += flops
        self.clipped += clipped
        self.seconds += seconds

    def rate(self) -> float:
        """This process's tokens per second of update."""
        return (self.tokens_seen - self.before[0]) / max(self.seconds, 1e-9)


BLOWUP = 2.0          # an outer-pass loss above BLOWUP x the starting loss: the run blew up
UNIFORM_MARGIN = 0.99  # the loss must end below 99% of ln(vocab), the uniform guess


def check_learned(curve: list[dict], vocab: int) -> None:
    """What a run must show before `trained=true` (docs/training.md "The learned-check")."""
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


def changed_tensors(run) -> list[str]:
    """The names of the trained tensors that changed; TrainingFailed if none did."""
    now = run.host_params()
    changed = [n for n in run.trainable if not np.array_equal(run.start[n], now[n])]
    if not changed:
        raise TrainingFailed("no weight changed during training; nothing to claim")
    return changed


def weights_meta(run, log: Log, labels: dict) -> dict:
    job = run.job
    return {"job": job.id, "step_n": run.step_n, "trained": True, "not_sgd": False,
            "arch": run.model.cfg.to_dict(), "loss_before": log.curve[0]["loss"],
            "loss_after": log.curve[-1]["loss"], "sparkbc_sha256": job.sparkbc_sha256,
            "base": job.base, **run.data.weights_meta, **labels, **run.device.record()}


def checkpoint(run, log: Log, changed: list[str], weights_sha256: str, labels: dict) -> dict:
    """checkpoint.json (docs/outputs.md); trained/not_sgd/sgd/claim: the original's fixed fields."""
    job, step, cfg = run.job, run.step, run.model.cfg
    return {
        "job": job.id, "step_n": run.step_n, "loss_before": log.curve[0]["loss"],
        "loss_after": log.curve[-1]["loss"], "loss_curve": log.curve, **step_record(step),
        "train_attn": cfg.train_attn, "dataset": job.dataset,
        "arch": cfg.to_dict(), "n_params": run.model.n_params, "trained_tensors": len(changed),
        "frozen_tensors": ",".join(sorted(set(run.params) - set(run.trainable))),
        "micro_steps": step.passes() * step.inner, "clipped_steps": log.clipped,
        "tokens_seen": log.tokens_seen, "weights": job.rel(WEIGHTS),
        "weights_sha256": weights_sha256, "sparkbc_sha256": job.sparkbc_sha256,
        "program": job.program, "method": job.method, "base": job.base,
        "base_step_n": run.base_step, "blas_threads": live_threads(), "trained": True,
        "not_sgd": False, "sgd": True, "claim": False, "device": run.device.name,
        **run.device.made_with(),  # kernel family + numpy/BLAS: what repro-check names
        **run.data.checkpoint, **labels,
    }


# The matmul peak takes about 0.5 s to measure on a CPU: a run that trained for less
# than this reports its speed without the MFU (the probe would add a tenth or more to
# the run it rates; `spark bench` always measures it).
PEAK_MIN_TRAIN_S = 5.0


def perf(run, log: Log) -> dict:
    """perf.json: this process's speed (undeclared to DVC: timings vary)."""
    seconds = max(log.seconds, 1e-9)
    record = {"train_seconds": round(log.seconds, 4),
              "total_seconds": round(time.perf_counter() - log.t0, 4),
              "tokens": log.tokens_seen, "tokens_per_s": round(log.rate(), 1),
              "model_flops_per_s": round((log.flops_seen - log.before[1]) / seconds, 1),
              "blas_threads": live_threads(), "shards": run.engine.shards,
              "workers": run.engine.workers, "device": run.device.name,
              **run.device.kernel_record()}
    peak = run.device.matmul_peak() if log.seconds >= PEAK_MIN_TRAIN_S else 0.0
    if peak:
        # every worker process computed, one BLAS pool each: over the peak of all of them
        processes = run.engine.workers if run.device.host else 1
        record.update(matmul_peak_flops_per_s=round(peak, 1), matmul_peak_processes=processes)
        mfu = record["model_flops_per_s"] / (peak * processes)
        if mfu <= 1:  # above 1 the peak was mis-measured (a busy machine): no ratio
            record["mfu"] = round(mfu, 4)
    return record


def commit(run, log: Log, changed: list[str], labels: dict) -> StepResult:
    """One commit of the run's set: weights, checkpoint, ARTIFACT, perf.json, its curves
    (dvclive/) and the tokenizer.json and corpus/ it staged; then the resume state goes."""
    job = run.job
    wbytes = weights_bytes(run.host_params(), weights_meta(run, log, labels))
    wsha = sha256_bytes(wbytes)
    ck = checkpoint(run, log, changed, wsha, labels)
    speed = perf(run, log)
    files = {WEIGHTS: wbytes, CHECKPOINT: canonical_json(ck).encode(),
             ARTIFACT: outputs.sgd_artifact(job, run.step_n, run.device.kind,
                                            run.step.optimizer).encode(),
             PERF: canonical_json(speed).encode()}
    outputs.commit_files(job.out_dir, files,
                         {**outputs.staged_inputs(job.out_dir), **live.pending(job.out_dir)})
    outputs.drop_staged(job.out_dir)
    outputs.clear_failure(job.out_dir)
    clear_state(job.out_dir)
    live.discard(job.out_dir)
    return StepResult(checkpoint=ck, perf=speed, weights_sha256=wsha, files=files)


def run_failed(job, err: Exception, step) -> None:
    """Record a failed attempt beside (never over) the previous good outputs."""
    outputs.write_failure(job.out_dir, {"job": job.id, "state": "failed", "reason": str(err),
                                        "lr": step.lr, "outer": step.outer, "inner": step.inner,
                                        "step": step_record(step)})


def initial_params(job: Job, model: Model, seed: int, salt: bytes,
                   residual_out: str = "scaled"):
    """(params, base step_n): the base's weights when a file, else fresh init (step.init_out)."""
    if not job.base_is_weights:
        return model.init_params(seed, salt, dtype=np.float32, residual_out=residual_out), 0
    params, meta = load_weights(job.base)
    base_cfg = config_from_meta(meta, job.base)
    if base_cfg.kind is not model.cfg.kind:
        raise SparkError(f"base {job.base} was trained with train_attn={base_cfg.train_attn}, "
                         f"this run has train_attn={model.cfg.train_attn}")
    check_params(params, model.cfg, job.base)
    step_n = meta.get("step_n", 0)
    if not _count(step_n):
        raise SparkError(f"base {job.base}: metadata step_n {step_n!r} is not a count")
    return params, step_n


def resolve_step_n(requested: int | None, base_step: int, base: str) -> int:
    if requested is None:
        return base_step + 1
    if requested <= base_step:
        raise SparkError(f"step {requested} must be greater than the base's step_n {base_step} "
                         f"({base}); omit it to use {base_step + 1}")
    return requested


def fingerprint(job: Job, cfg, data_fingerprint, step, device) -> str:
    """What a saved state must match: all that decides the run's bytes (not the workers).
    Not stop_after_pass: the passes before the stop are those of the whole run, so a state
    saved after pass j resumes the run stopped after pass k >= j, and the other way."""
    return sha256_bytes(canonical_json({
        "job": job.id, "arch": cfg.to_dict(), "data": data_fingerprint,
        "step": {k: v for k, v in dataclasses.asdict(step).items()
                 if k not in ("workers", "device", "stop_after_pass")},
        "sparkbc_sha256": job.sparkbc_sha256, "base": job.base, **device.record()}).encode())


def save_state(run, log) -> None:
    """The whole state after pass `log.done`, through the commit journal (never half)."""
    tensors = {f"param.{n}": a for n, a in run.host_params().items()}
    opt_state = run.device.to_host(run.optimizer.state())
    tensors.update({f"opt.{n}": a for n, a in opt_state.items()})
    state = {"fingerprint": run.fingerprint, "done": log.done, "curve": log.curve,
             "tokens_seen": log.tokens_seen, "clipped": log.clipped,
             "flops_seen": log.flops_seen, "sampler": run.data.sampler.state()}
    outputs.commit_files(run.job.out_dir, {
        RESUME_TENSORS: weights_bytes(tensors, {"resume_of": run.job.id}),
        RESUME_STATE: canonical_json(state).encode()})


def load_state(run, log, say) -> None:
    """Continue a saved state of this very run, checked first; else `say` why and start afresh."""
    folder = run.job.out_dir
    outputs.recover(folder)
    path = folder / RESUME_STATE
    if not path.is_file() or not (folder / RESUME_TENSORS).is_file():
        return
    try:
        state = load_json(read_input(path, "job file"), os.fspath(path))
        if not isinstance(state, dict) or state.get("fingerprint") != run.fingerprint:
            say(f"[{run.job.id}] {path} is the state of another run; starting afresh")
            return
        _check_state(state, run)
        tensors, _ = load_weights(folder / RESUME_TENSORS)
        want = {**{f"param.{n}": a for n, a in run.host_params().items()},
                **{f"opt.{n}": a for n, a in run.device.to_host(run.optimizer.state()).items()}}
        if {k: (a.shape, a.dtype) for k, a in tensors.items()} != \
                {k: (a.shape, a.dtype) for k, a in want.items()}:
            raise ValueError("its tensors are not this run's")
        # the optimizer's own counters and moments, against the passes the state says it did
        run.optimizer.check_state({k[4:]: v for k, v in tensors.items() if k.startswith("opt.")},
                                  state["done"] * run.step.inner)
    except (SparkError, ValueError, TypeError, KeyError, RecursionError, OSError) as err:
        say(f"[{run.job.id}] the saved state in {folder} is torn or malformed "
            f"({str(err)[:200]}); discarding it and starting afresh")
        clear_state(folder)
        return
    ops = run.device.ops
    for n in run.params:  # host float32 in the file, whatever device saved it
        run.params[n] = ops.load(run.params[n], tensors[f"param.{n}"])
    run.optimizer.load_state({k[4:]: v for k, v in tensors.items() if k.startswith("opt.")})
    run.data.sampler.set_state(state["sampler"])
    log.resumed(state["curve"], state["done"], state["tokens_seen"], state["clipped"],
                state["flops_seen"])


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_state(state: dict, run) -> None:
    """resume.json's fields as save_state writes them, else ValueError naming the first bad one."""
    done, curve = state.get("done"), state.get("curve")
    if not _count(done) or not 1 <= done < run.step.outer or done > run.step.passes():
        raise ValueError(f"done {done!r} is not a pass of this run")
    if not isinstance(curve, list) or len(curve) != done + 1 or not all(
            isinstance(p, dict) and p.get("outer") == i and isinstance(p.get("phase"), str)
            and all(outputs.number(v) is not None for k, v in p.items() if k != "phase")
            for i, p in enumerate(curve)):
        raise ValueError("its curve is not one finite point per pass")
    for key in ("tokens_seen", "clipped", "flops_seen"):
        if not _count(state.get(key)):
            raise ValueError(f"{key} is not a count")
    sampler, fresh = run.data.sampler, run.data.sampler.state()
    try:  # the sampler takes the state and draws from it, or it is not this run's
        sampler.set_state(state.get("sampler"))
        sampler.next()
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, AttributeError):
        raise ValueError("its sampler state is not of this run's sampler") from None
    finally:
        sampler.set_state(fresh)


def clear_state(folder) -> None:
    for name in (RESUME_STATE, RESUME_TENSORS):
        (folder / name).unlink(missing_ok=True)
