"""`spark bench`: time the loop's micro-step (gradients of random tokens, then plain SGD or a
job's update) against the float32 matmul peak measured just before (docs/gpu.md)."""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from sparktrain import runtime
from sparktrain.runtime import live_threads
from sparktrain.core.fsutil import sha256_bytes
from sparktrain.model.base import TokenBatch
from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES, flops_per_token
from sparktrain.model.memory import check_fits
from sparktrain.model.device import CPU
from sparktrain.model.parallel import GradientEngine

DEFAULT_BATCH = {"tiny": 8, "large": 16, "medium": 16, "gpu": 8}
BENCH_SEED = 1234
BENCH_LR = 1e-3
WARMUP_STEPS = 2
# what the loop reaches of a CPU's matmul peak: about a fifth (README's bench table: 14-24 %)
CPU_SHARE_OF_PEAK = 0.2
GRIND_S = 180  # a CPU run estimated above this is said before it starts


def cpu_estimate_s(cfg, tokens: int, peak: float | None = None) -> float:
    """Seconds a CPU run of `tokens` should take: FLOPs over a share of the matmul peak."""
    return flops_per_token(cfg) * tokens / ((peak or CPU.matmul_peak()) * CPU_SHARE_OF_PEAK)


def grind_note(device, requested: str, cfg, tokens: int, what: str) -> str | None:
    """One line when `--device auto` fell back to the CPU for a run estimated above GRIND_S."""
    if requested != "auto" or not device.host:
        return None
    seconds = cpu_estimate_s(cfg, tokens)
    if seconds <= GRIND_S:
        return None
    return (f"{what} on the CPU (--device auto found no GPU): estimated ~{_duration(seconds)} "
            f"({flops_per_token(cfg) / 1e6:,.0f} MFLOP/token x {tokens:,} tokens at "
            f"{CPU_SHARE_OF_PEAK:.0%} of this CPU's measured matmul peak); --device cpu to "
            f"run it anyway without this note, or a machine with a GPU")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def synthetic_batch(batch_size: int, seq_len: int, seed: int = BENCH_SEED,
                    vocab: int = 256) -> TokenBatch:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (batch_size, seq_len + 1))        # (B, T+1)
    return TokenBatch(tokens[:, :-1], tokens[:, 1:], np.ones((batch_size, seq_len), np.float32))


def sgd_step(params, grads, lr):
    for name, p in params.items():
        grads[name] *= lr
        p -= grads[name]


def plain_sgd(params):
    """The default update: SGD at BENCH_LR, no momentum, no clip."""
    return lambda params, grads, t: sgd_step(params, grads, BENCH_LR)


plain_sgd.label = "plain SGD"


def run_bench(scale: str, batch_size: int | None = None, steps: int = 10,
              progress=None, cfg=None, shards: int = 1, workers: int | None = 1,
              peak: float | None = None, device=CPU, make_update=plain_sgd) -> dict:
    """`workers` None: as many as training would start. `make_update(params)` returns
    the micro-step's `update(params, grads, t)`, its `label` names it in the report."""
    cfg = cfg or SCALES[scale]
    batch_size = batch_size or DEFAULT_BATCH.get(scale, 16)
    check_fits("spark bench", cfg, batch_size, moments=0)  # plain SGD, no moments
    model = build_model(cfg)
    params = device.to_device(model.init_params(BENCH_SEED, b"bench"))
    batch = synthetic_batch(batch_size, cfg.seq_len, vocab=cfg.vocab)
    peak = peak or device.matmul_peak(fresh=True)
    update = make_update(params)
    times = []
    with GradientEngine(model, shards, device.workers(workers)) as engine:  # warm-up starts them
        for i in range(WARMUP_STEPS + steps):
            t0 = time.perf_counter()
            loss, grads = engine.loss_and_grads(params, batch)
            update(params, grads, i)
            device.sync()
            dt = time.perf_counter() - t0
            if i >= WARMUP_STEPS:
                times.append(dt)
            if progress:
                progress(i + 1, WARMUP_STEPS + steps, loss)
        workers = engine.workers
    step_s = float(np.median(times))
    tok_s = batch_size * cfg.seq_len / step_s
    model_flops = tok_s * model.flops_per_token()
    processes = workers if device.host else 1  # each worker process has a pool of its own
    return {
        "scale": scale, "device": device.name, "arch": cfg.to_dict(), "vocab": cfg.vocab,
        "n_params": model.n_params, "batch_size": batch_size, "seq_len": cfg.seq_len,
        "steps": steps, "warmup_steps": WARMUP_STEPS, "blas_threads": live_threads(),
        "blas_kernel": runtime.made_with()["kernel"], "shards": shards, "workers": workers,
        "update": make_update.label, "median_step_s": step_s, "min_step_s": float(min(times)),
        "tokens_per_s": tok_s, "flops_per_token": model.flops_per_token(),
        "model_flops_per_s": model_flops, "matmul_peak_flops_per_s": peak,
        "matmul_peak_processes": processes, "utilisation": model_flops / (peak * processes),
        "final_loss": float(loss), "params_sha256": sha256_bytes(
            b"".join(p.tobytes() for p in device.to_host(params).values())),
    }


def run_scaling(scale: str, workers: int, shards: int | None = None, rounds: int = 3,
                batch_size: int | None = None, steps: int = 10, cfg=None,
                progress=None, make_update=plain_sgd) -> dict:
    """1 worker against `workers` workers at one shard count, interleaved `rounds` times."""
    shards = shards or workers
    peak = CPU.matmul_peak(fresh=True)
    runs: dict[int, list[dict]] = {1: [], workers: []}
    for r in range(rounds):
        for w in runs:
            result = run_bench(scale, batch_size, steps, cfg=cfg, shards=shards, workers=w,
                               peak=peak, make_update=make_update)
            runs[w].append(result)
            if progress:
                progress(f"round {r + 1}/{rounds}: {result['workers']} worker(s) "
                         f"{result['tokens_per_s']:,.0f} tokens/s")
    medians = {w: float(np.median([x["tokens_per_s"] for x in rs])) for w, rs in runs.items()}
    last = runs[workers][-1]
    return dict(last, **{
        "tokens_per_s": medians[workers], "rounds": rounds,
        "scaling": {"shards": shards, "workers": [1, last["workers"]],
                    "tokens_per_s": [medians[1], medians[workers]],
                    "speedup": medians[workers] / medians[1],
                    # the machine's 1-minute load average as the rounds end, and its cores:
                    # a speed-up under 1 on a loaded machine is the load's, not the shards'
                    "load_average": round(os.getloadavg()[0], 2),
                    "cores": len(os.sched_getaffinity(0)),
                    "same_bytes": len({x["params_sha256"] for rs in runs.values()
                                       for x in rs}) == 1}})


def format_report(r: dict) -> str:
    return "\n".join([
        f"bench {r['scale']}: {r['n_params']:,} params, vocab {r['vocab']}, batch "
        f"{r['batch_size']} x seq {r['seq_len']}, {r['update']}, {r['steps']} steps after "
        f"{r['warmup_steps']} warm-up, device {r['device']}",
        f"processes     {r['workers']:8d}     ({r['shards']} shard{'s' * (r['shards'] != 1)}, BLAS threads "
        f"{r['blas_threads']} each, kernel {r.get('blas_kernel', '?')})",
        f"median step   {r['median_step_s'] * 1e3:8.2f} ms   (min {r['min_step_s'] * 1e3:.2f} ms)",
        f"tokens/s      {r['tokens_per_s']:11,.0f}",
        f"model FLOP/s  {r['model_flops_per_s'] / 1e9:8.2f} G   "
        f"({r['flops_per_token']:,} FLOPs/token)",
        f"matmul peak   {r['matmul_peak_flops_per_s'] / 1e9:8.2f} G   (float32, one process"
        f"{'' if r['device'] == 'cpu' else ', on the device'}; x {r['matmul_peak_processes']} "
        f"for the utilisation)",
        f"utilisation   {100 * r['utilisation']:8.1f} %",
    ] + _scaling_lines(r))


def _scaling_lines(r: dict) -> list[str]:
    if "scaling" not in r:
        return []
    s = r["scaling"]
    (w1, wn), (t1, tn) = s["workers"], s["tokens_per_s"]
    return [
        f"shards        {s['shards']:8d}     (bytes depend on the shard count only)",
        f"workers {w1:<5d} {t1:11,.0f} tokens/s   (median of {r['rounds']} interleaved rounds)",
        f"workers {wn:<5d} {tn:11,.0f} tokens/s   speed-up {s['speedup']:.2f}x",
        f"load average  {s['load_average']:8.2f}     (1 minute, on {s['cores']} usable "
        f"core{'s' * (s['cores'] != 1)}"
        + ("; other processes shared them, so the speed-up is low)"
           if s["load_average"] > s["cores"] - 1 else ")"),
        f"same bytes    {'yes' if s['same_bytes'] else 'NO'}",
    ]


def stderr_progress(i, n, loss):
    """One line rewritten in place on a terminal; elsewhere only the last step's line."""
    err = sys.stderr
    if err.isatty():
        err.write(f"\rstep {i}/{n}  loss {loss:.4f}" + ("\n" if i == n else ""))
    elif i == n:
        err.write(f"step {i}/{n}  loss {loss:.4f}\n")
    err.flush()
