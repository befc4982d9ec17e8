"""Where a run starts and resumes: its base (a weights file or a fresh init), its step_n,
and the saved state of this very run after a pass, used whole only when its fingerprint is
this run's (docs/outputs.md "The commit journal", which saves it)."""
from __future__ import annotations

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import canonical_json, sha256_bytes
from sparktrain.core.jobfiles import RESUME_STATE, RESUME_TENSORS
from sparktrain.core.safeload import load_json_file
from sparktrain.core.values import is_count, number
from sparktrain.knobs import fingerprinted
from sparktrain.model.base import Model
from sparktrain.model.weights import check_params, config_from_meta, load_weights, weights_bytes
from sparktrain.train.job import Job
from sparktrain.train.state import Run


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
    if not is_count(step_n):
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
    """What a saved state must match: all that decides the run's bytes, the step knobs
    those whose role says so (sparktrain/knobs.py: not the workers, not stop_after_pass,
    a knob added later only when set off its default)."""
    return sha256_bytes(canonical_json({
        "job": job.id, "arch": cfg.to_dict(), "data": data_fingerprint,
        "step": fingerprinted(step),
        "sparkbc_sha256": job.sparkbc_sha256, "base": job.base, **device.record()}).encode())


def save_state(run: Run, counts) -> None:
    """The whole state after pass `counts.done`, through the commit journal (never half)."""
    tensors = {f"param.{n}": a for n, a in run.host_params().items()}
    opt_state = run.device.to_host(run.optimizer.state())
    tensors.update({f"opt.{n}": a for n, a in opt_state.items()})
    tensors.update({f"best.{n}": a for n, a in (run.best or {}).items()})  # step.keep_best
    if run.average is not None:  # step.ema
        tensors.update({f"avg.{n}": a for n, a in run.device.to_host(run.average.state()).items()})
    state = {"fingerprint": run.fingerprint, "done": counts.done, "curve": counts.curve,
             "tokens_seen": counts.tokens_seen, "clipped": counts.clipped,
             "flops_seen": counts.flops_seen, "sampler": run.data.sampler.state()}
    run.folder.commit({
        RESUME_TENSORS: weights_bytes(tensors, {"resume_of": run.job.id}),
        RESUME_STATE: canonical_json(state).encode()})


def load_state(run: Run, counts, say) -> None:
    """Continue a saved state of this very run, checked first; else `say` why and start afresh."""
    run.folder.recover()
    folder = run.folder.path
    path = folder / RESUME_STATE
    if not path.is_file() or not (folder / RESUME_TENSORS).is_file():
        return
    try:
        state = load_json_file(path, "job file")
        if not isinstance(state, dict) or state.get("fingerprint") != run.fingerprint:
            say(f"[{run.job.id}] {path} is the state of another run; starting afresh")
            return
        _check_state(state, run)
        tensors, _ = load_weights(folder / RESUME_TENSORS)
        host = run.host_params()
        want = {**{f"param.{n}": a for n, a in host.items()},
                **{f"opt.{n}": a for n, a in run.device.to_host(run.optimizer.state()).items()},
                **({f"best.{n}": a for n, a in host.items()} if run.step.keep_best else {}),
                **({f"avg.{n}": host[n] for n in run.trainable} if run.average else {})}
        if {k: (a.shape, a.dtype) for k, a in tensors.items()} != \
                {k: (a.shape, a.dtype) for k, a in want.items()}:
            raise ValueError("its tensors are not this run's")
        # the optimizer's own counters and moments, against the passes the state says it did
        run.optimizer.check_state(_under(tensors, "opt."),
                                  state["done"] * run.step.inner)
    except (SparkError, ValueError, TypeError, KeyError, RecursionError, OSError) as err:
        say(f"[{run.job.id}] the saved state in {folder} is torn or malformed "
            f"({str(err)[:200]}); discarding it and starting afresh")
        run.folder.clear_resume()
        return
    ops = run.device.ops
    for n in run.params:  # host float32 in the file, whatever device saved it
        run.params[n] = ops.load(run.params[n], tensors[f"param.{n}"])
    run.optimizer.load_state(_under(tensors, "opt."))
    run.data.sampler.set_state(state["sampler"])
    if run.step.keep_best:  # the best pass's weights so far; the curve says which pass
        run.best = {n: tensors[f"best.{n}"] for n in run.params}
    if run.average is not None:
        run.average.load_state(_under(tensors, "avg."), run.params, ops.load)
    counts.resumed(state["curve"], state["done"], state["tokens_seen"], state["clipped"],
                state["flops_seen"])


def _under(tensors: dict, prefix: str) -> dict:
    """A resume file's tensors saved under `prefix` (opt., avg.), keyed without it."""
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def _check_state(state: dict, run: Run) -> None:
    """resume.json's fields as save_state writes them, else ValueError naming the first bad one."""
    done, curve = state.get("done"), state.get("curve")
    if not is_count(done) or not 1 <= done < run.step.outer or done > run.step.passes():
        raise ValueError(f"done {done!r} is not a pass of this run")
    if not isinstance(curve, list) or len(curve) != done + 1 or not all(
            isinstance(p, dict) and p.get("outer") == i and isinstance(p.get("phase"), str)
            and all(number(v) is not None for k, v in p.items() if k != "phase")
            for i, p in enumerate(curve)):
        raise ValueError("its curve is not one finite point per pass")
    for key in ("tokens_seen", "clipped", "flops_seen"):
        if not is_count(state.get(key)):
            raise ValueError(f"{key} is not a count")
    sampler, fresh = run.data.sampler, run.data.sampler.state()
    try:  # the sampler takes the state and draws from it, or it is not this run's
        sampler.set_state(state.get("sampler"))
        sampler.next()
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, AttributeError):
        raise ValueError("its sampler state is not of this run's sampler") from None
    finally:
        sampler.set_state(fresh)
