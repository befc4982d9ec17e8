#!/usr/bin/env python3
"""Where a training micro-step's time goes (docs/results/speed.md, "Where a step's time goes").

    .venv/bin/python tools/step_profile.py --scale medium [--batch-size 8] [--steps 20]
                                           [--optimizer muon] [--workers 2] [--json]

`spark bench`'s loop core (sparktrain/train/bench.py: the same synthetic batch, init and
warm-up), timed in parts:

- every layer pair of sparktrain/model/layers.py and options.py, forward and backward, by wrapping the
  functions (their matrix products included);
- between the layers: a block's forward / backward less the layer functions it calls (the
  head regrouping copies, the residual adds, the fused weight planes);
- the products alone: every matrix product of one step, recorded once (shapes and memory
  layout of each operand) and replayed by itself, so "products" is what the BLAS kernel
  needs for the step's arithmetic and the rest is everything around it;
- the optimizer's update (SGD, AdamW, or Muon with its Newton-Schulz iterations);
- with --workers 2: the shard hand-off (the step less the parent's own shard and the
  in-order sum).

Numbers are medians over --steps micro-steps after 2 warm-up ones, one BLAS thread as the
runtime pins it; on a loaded machine compare shares, not milliseconds.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
import tracemalloc
from collections import defaultdict

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
import numpy as np

from sparktrain.model import backend, build, layers, options, parallel
from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES
from sparktrain.model.parallel import GradientEngine
from sparktrain.params import StepConfig
from sparktrain.train.bench import BENCH_SEED, DEFAULT_BATCH, WARMUP_STEPS, synthetic_batch
from sparktrain.train.optim import make_optimizer

# layers.py's and options.py's pairs, grouped as the profile reports them
GROUPS = {
    "embedding": ("embedding",), "rmsnorm": ("rmsnorm",), "rope": ("rope",),
    "attention": ("attention",), "mlp": ("swiglu", "relu2"), "linear (o, lm_head)": ("linear",),
    "cross-entropy": ("cross_entropy",), "softcap": ("softcap",),
}


class Timers:
    def __init__(self):
        self.t = defaultdict(float)
        self.depth = 0

    @contextlib.contextmanager
    def part(self, name):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.t[name] += time.perf_counter() - t0


def _wrap(module, fname, timers: Timers, key: str):
    fn = getattr(module, fname)

    def timed(*a, **k):
        with timers.part(key):
            return fn(*a, **k)
    setattr(module, fname, timed)
    return fn


@contextlib.contextmanager
def instrumented(timers: Timers):
    """layers.py's and options.py's functions and the block methods timed into `timers` (restored after)."""
    saved = []
    for group, prefixes in GROUPS.items():
        for p in prefixes:
            for d in ("forward", "backward"):
                name = f"{p}_{d}"
                for module in (layers, options):
                    if hasattr(module, name):
                        saved.append((module, name, _wrap(module, name, timers, f"{group} {d}")))
    # build.MLPS holds the MLP pairs themselves: point it at the timed ones
    saved_mlps = dict(build.MLPS)
    for kind, (names, fwd, bwd) in saved_mlps.items():
        module = layers if hasattr(layers, fwd.__name__) else options
        build.MLPS[kind] = (names, getattr(module, fwd.__name__), getattr(module, bwd.__name__))
    for meth, key in (("_block_forward", "block forward"), ("_block_backward", "block backward")):
        saved.append((build.Transformer, meth, _wrap(build.Transformer, meth, timers, key)))
    try:
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
        build.MLPS.update(saved_mlps)


# ------------------------------------------------------------- the products alone

class Traced(np.ndarray):
    """An ndarray that logs every matmul it takes part in (shapes, operand layout)."""
    log: list = []

    @staticmethod
    def _plain(x):
        if isinstance(x, Traced):
            return x.view(np.ndarray)
        if isinstance(x, (list, tuple)):
            return type(x)(Traced._plain(i) for i in x)
        if isinstance(x, dict):
            return {k: Traced._plain(v) for k, v in x.items()}
        return x

    @staticmethod
    def _wrap(x):
        if isinstance(x, np.ndarray) and not isinstance(x, Traced):
            return x.view(Traced)
        if isinstance(x, tuple):
            return tuple(Traced._wrap(i) for i in x)
        if isinstance(x, list):
            return [Traced._wrap(i) for i in x]
        return x

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        args = self._plain(inputs)
        if "out" in kw:
            outs = kw["out"]
            kw["out"] = self._plain(outs)
        if ufunc is np.matmul and method == "__call__":
            Traced.log.append(tuple((a.shape, _transposed(a)) for a in args[:2]))
        result = getattr(ufunc, method)(*args, **kw)
        if "out" in kw:  # the caller's buffers, as views that keep logging
            return self._wrap(outs[0] if len(outs) == 1 else outs)
        return self._wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        return self._wrap(func(*self._plain(args), **self._plain(kwargs)))


def _transposed(a) -> bool:
    return a.ndim >= 2 and a.strides[-2] < a.strides[-1]


def _operand(shape, transposed, rng):
    if not transposed:
        return rng.standard_normal(shape, dtype=np.float32)
    swapped = shape[:-2] + (shape[-1], shape[-2])
    return rng.standard_normal(swapped, dtype=np.float32).swapaxes(-1, -2)


def record_products(model, params, batch) -> list:
    """Every matmul of one forward + backward: ((shape, transposed), (shape, transposed))."""
    Traced.log = []
    traced = {n: p.view(Traced) for n, p in params.items()}
    ops = backend.NUMPY
    methods = [m for m in vars(type(ops)) if not m.startswith("_") and callable(getattr(ops, m))]
    for m in methods:  # the backend's helpers make fresh arrays: keep them traced too
        setattr(ops, m, (lambda f: lambda *a, **k: Traced._wrap(f(*a, **k)))(getattr(ops, m)))
    try:
        model.loss_and_grads(traced, batch)
    finally:
        for m in methods:
            delattr(ops, m)
    return list(Traced.log)


def product_flops(sa: tuple, sb: tuple) -> float:
    """2 m k n times the batch of one matmul (a 1-D operand is one row or column)."""
    m = sa[-2] if len(sa) > 1 else 1
    n = sb[-1] if len(sb) > 1 else 1
    batch = np.prod(np.broadcast_shapes(sa[:-2], sb[:-2]) or 1)
    return 2.0 * float(batch) * m * sa[-1] * n


def replay_products(products, repeats: int) -> tuple[float, float]:
    """(median seconds of all the step's products, their FLOPs)."""
    rng = np.random.default_rng(0)
    ops = [(_operand(sa, ta, rng), _operand(sb, tb, rng)) for (sa, ta), (sb, tb) in products]
    flops = sum(product_flops(a.shape, b.shape) for a, b in ops)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        for a, b in ops:
            a @ b
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:])), float(flops)


# ------------------------------------------------------------------ the profile

def profile(scale: str, batch_size: int | None, steps: int, optimizer: str,
            workers: int) -> dict:
    cfg = SCALES[scale]
    B = batch_size or DEFAULT_BATCH.get(scale, 16)
    model = build_model(cfg)
    params = model.init_params(BENCH_SEED, b"bench")
    batch = synthetic_batch(B, cfg.seq_len, vocab=cfg.vocab)
    step = StepConfig(optimizer=optimizer, lr=1e-3, clip=0.0)
    names = list(params)
    opt = make_optimizer(step, params, names)
    products = record_products(model, params, batch)
    timers = Timers()
    per_step = defaultdict(list)
    totals = []
    with GradientEngine(model, workers, workers) as engine, instrumented(timers):
        own = engine.model
        for i in range(WARMUP_STEPS + steps):
            timers.t.clear()
            t0 = time.perf_counter()
            with timers.part("gradients"):
                loss, grads = engine.loss_and_grads(params, batch)
            with timers.part("optimizer"):
                opt.update(params, grads, 1e-3, 1.0)
            total = time.perf_counter() - t0
            if i >= WARMUP_STEPS:
                totals.append(total)
                for k, v in timers.t.items():
                    per_step[k].append(v)
    med = {k: float(np.median(v)) for k, v in per_step.items()}
    step_s = float(np.median(totals))
    prod_s, prod_flops = replay_products(products, max(5, steps))
    rows = []
    layer_sum = 0.0
    for group in GROUPS:
        f, b = med.get(f"{group} forward", 0.0), med.get(f"{group} backward", 0.0)
        if f + b:
            rows.append((group, f, b))
            layer_sum += f + b
    inside_blocks = sum(med.get(f"{g} {d}", 0.0) for g in ("rmsnorm", "rope", "attention", "mlp",
                        "linear (o, lm_head)") for d in ("forward", "backward"))
    # o is a linear inside the block; lm_head's linear and the final norm are outside it
    glue = med.get("block forward", 0.0) + med.get("block backward", 0.0) - inside_blocks
    with tracemalloc_step(engine_factory=lambda: model, params=params, batch=batch) as alloc:
        pass
    return {
        "scale": scale, "batch_size": B, "seq_len": cfg.seq_len, "optimizer": optimizer,
        "workers": workers, "shards": workers, "steps": steps, "step_s": step_s,
        "tokens_per_s": B * cfg.seq_len / step_s,
        "gradients_s": med["gradients"], "optimizer_s": med["optimizer"],
        "layers": rows, "layer_sum_s": layer_sum, "between_layers_s": glue,
        "products_s": prod_s / workers, "products_gflop": prod_flops / 1e9,
        "products_count": len(products), "allocated_mib_per_step": alloc["mib"],
        "handoff_s": (med["gradients"] - layer_sum - glue) if workers > 1 else None,
        "blas_kernel": runtime.made_with()["kernel"],
    }


@contextlib.contextmanager
def tracemalloc_step(engine_factory, params, batch):
    """MiB numpy allocates in one forward + backward (tracemalloc's peak over the step)."""
    model = engine_factory()
    model.loss_and_grads(params, batch)
    tracemalloc.start()
    model.loss_and_grads(params, batch)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    yield {"mib": peak / (1 << 20)}


def render(r: dict) -> str:
    ms = lambda s: f"{s * 1e3:8.2f}"
    step = r["step_s"]
    lines = [f"{r['scale']}: batch {r['batch_size']} x {r['seq_len']}, {r['optimizer']}, "
             f"{r['workers']} worker(s) / shard(s), kernel {r['blas_kernel']}: "
             f"{ms(step)} ms a step, {r['tokens_per_s']:,.0f} tokens/s",
             f"{'part':28s} {'fwd ms':>8s} {'bwd ms':>8s} {'share':>6s}"]
    for group, f, b in r["layers"]:
        lines.append(f"{group:28s} {ms(f)} {ms(b)} {100 * (f + b) / step:5.1f}%")
    lines.append(f"{'between the layers':28s} {ms(r['between_layers_s'])} {'':8s} "
                 f"{100 * r['between_layers_s'] / step:5.1f}%")
    if r["handoff_s"] is not None:
        lines.append(f"{'shard hand-off + sum':28s} {ms(r['handoff_s'])} {'':8s} "
                     f"{100 * r['handoff_s'] / step:5.1f}%")
    lines.append(f"{'optimizer update':28s} {ms(r['optimizer_s'])} {'':8s} "
                 f"{100 * r['optimizer_s'] / step:5.1f}%")
    rest = step - r["layer_sum_s"] - r["between_layers_s"] - r["optimizer_s"] - (
        r["handoff_s"] or 0.0)
    lines.append(f"{'rest (loss glue, timers)':28s} {ms(rest)} {'':8s} {100 * rest / step:5.1f}%")
    lines.append(f"{'products alone (replayed)':28s} {ms(r['products_s'])} {'':8s} "
                 f"{100 * r['products_s'] / step:5.1f}%   ({r['products_count']} products, "
                 f"{r['products_gflop']:.2f} GFLOP{' per shard' if r['workers'] > 1 else ''})")
    lines.append(f"allocated in one forward + backward (tracemalloc peak): "
                 f"{r['allocated_mib_per_step']:.1f} MiB")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="medium", choices=sorted(SCALES))
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--optimizer", default="sgd", choices=("sgd", "adamw", "muon"))
    ap.add_argument("--workers", type=int, default=1, choices=(1, 2),
                    help="shards = workers (default 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.steps < 1 or (args.batch_size is not None and args.batch_size < 1):
        print("step_profile: error: --steps and --batch-size must be positive", file=sys.stderr)
        return 2
    with parallel.quiet_nonfinite():
        r = profile(args.scale, args.batch_size, args.steps, args.optimizer, args.workers)
    print(json.dumps(r, sort_keys=True) if args.json else render(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
