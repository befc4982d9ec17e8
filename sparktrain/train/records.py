"""What a run records and claims (docs/outputs.md): its curve and counters (Counters), the
learned-check that must pass before `trained=true` (docs/training.md "Data sources and the one loop"), the weights' metadata,
checkpoint.json, perf.json and the one commit of them all; failed.json's record of a run
that must not be claimed. Each reads the run's state (state.Run)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from sparktrain.core.errors import TrainingFailed
from sparktrain.core.fsutil import canonical_json, sha256_bytes
from sparktrain.core.jobfiles import ARTIFACT, CHECKPOINT, PERF, WEIGHTS
from sparktrain.model.weights import weights_bytes
from sparktrain.params import step_record
from sparktrain.runtime import live_threads
from sparktrain.train import outputs
from sparktrain.train.state import Run


@dataclass
class StepResult:
    checkpoint: dict
    perf: dict
    weights_sha256: str
    files: dict = field(default_factory=dict)


@dataclass
class Counters:
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
    kept: int | None = None    # step.keep_best: the pass whose weights are committed

    def after(self) -> dict:
        """The curve point of the committed weights: the kept pass's, else the last."""
        return self.curve[-1] if self.kept is None else self.curve[self.kept]

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


def check_learned(curve: list[dict], vocab: int, kept: int | None = None) -> None:
    """What a run must show before `trained=true` (docs/training.md "Data sources and the one loop": the learned-check)."""
    after = curve[-1] if kept is None else curve[kept]  # the committed weights' point
    loss_before, loss_after = curve[0]["loss"], after["loss"]
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
    if kept is not None and not after["heldout_loss"] < curve[0]["heldout_loss"]:
        raise TrainingFailed(f"the kept pass {kept}'s held-out loss {after['heldout_loss']:.4f} "
                             f"is not below the start's {curve[0]['heldout_loss']:.4f}; the run "
                             "learned nothing it can keep (try another step.lr); previous "
                             "outputs kept")


def changed_tensors(run: Run) -> list[str]:
    """The names of the trained tensors that changed; TrainingFailed if none did."""
    now = run.host_params()
    changed = [n for n in run.trainable if not np.array_equal(run.start[n], now[n])]
    if not changed:
        raise TrainingFailed("no weight changed during training; nothing to claim")
    return changed


def weights_meta(run: Run, counts: Counters, labels: dict) -> dict:
    job = run.job
    return {"job": job.id, "step_n": run.step_n, "trained": True, "not_sgd": False,
            "arch": run.model.cfg.to_dict(), "loss_before": counts.curve[0]["loss"],
            "loss_after": counts.after()["loss"], "sparkbc_sha256": job.sparkbc_sha256,
            "base": job.base, **run.data.weights_meta, **labels, **run.device.record(),
            **({"kept_pass": counts.kept} if counts.kept is not None else {})}


def checkpoint(run: Run, counts: Counters, changed: list[str], weights_sha256: str,
               labels: dict) -> dict:
    """checkpoint.json (docs/outputs.md); trained/not_sgd/sgd/claim: the original's fixed fields."""
    job, step, cfg = run.job, run.step, run.model.cfg
    return {
        "job": job.id, "step_n": run.step_n, "loss_before": counts.curve[0]["loss"],
        "loss_after": counts.after()["loss"], "loss_curve": counts.curve, **step_record(step),
        **({"kept_pass": counts.kept} if counts.kept is not None else {}),
        "train_attn": cfg.train_attn, "dataset": job.dataset,
        "arch": cfg.to_dict(), "n_params": run.model.n_params, "trained_tensors": len(changed),
        "frozen_tensors": ",".join(sorted(set(run.params) - set(run.trainable))),
        "micro_steps": step.passes() * step.inner, "clipped_steps": counts.clipped,
        "tokens_seen": counts.tokens_seen, "weights": job.rel(WEIGHTS),
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


def perf(run: Run, counts: Counters) -> dict:
    """perf.json: this process's speed (undeclared to DVC: timings vary)."""
    seconds = max(counts.seconds, 1e-9)
    record = {"train_seconds": round(counts.seconds, 4),
              "total_seconds": round(time.perf_counter() - counts.t0, 4),
              "tokens": counts.tokens_seen, "tokens_per_s": round(counts.rate(), 1),
              "model_flops_per_s": round((counts.flops_seen - counts.before[1]) / seconds, 1),
              "blas_threads": live_threads(), "shards": run.engine.shards,
              "workers": run.engine.workers, "device": run.device.name,
              **run.device.kernel_record()}
    peak = run.device.matmul_peak() if counts.seconds >= PEAK_MIN_TRAIN_S else 0.0
    if peak:
        # every worker process computed, one BLAS pool each: over the peak of all of them
        processes = run.engine.workers if run.device.host else 1
        record.update(matmul_peak_flops_per_s=round(peak, 1), matmul_peak_processes=processes)
        mfu = record["model_flops_per_s"] / (peak * processes)
        if mfu <= 1:  # above 1 the peak was mis-measured (a busy machine): no ratio
            record["mfu"] = round(mfu, 4)
    return record


def commit(run: Run, counts: Counters, changed: list[str], labels: dict) -> StepResult:
    """One commit of the run's set: weights, checkpoint, ARTIFACT, perf.json, its curves
    (dvclive/) and the tokenizer.json and corpus/ it staged; then the resume state goes."""
    job = run.job
    wbytes = weights_bytes(run.host_params(), weights_meta(run, counts, labels))
    wsha = sha256_bytes(wbytes)
    ck = checkpoint(run, counts, changed, wsha, labels)
    speed = perf(run, counts)
    files = {WEIGHTS: wbytes, CHECKPOINT: canonical_json(ck).encode(),
             ARTIFACT: outputs.trained_artifact(job, run.step_n, run.device.kind,
                                            run.step.optimizer).encode(),
             PERF: canonical_json(speed).encode()}
    run.folder.commit_run(files)
    return StepResult(checkpoint=ck, perf=speed, weights_sha256=wsha, files=files)


def failure_record(job, err: Exception, step) -> dict:
    """failed.json's record of an attempt that must not be claimed (written beside, never
    over, the previous good outputs)."""
    return {"job": job.id, "state": "failed", "reason": str(err), "lr": step.lr,
            "outer": step.outer, "inner": step.inner, "step": step_record(step)}
