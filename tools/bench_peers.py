#!/usr/bin/env python3
"""`spark bench` against its PyTorch peers, in interleaved rounds (docs/results/speed.md,
"Where a step's time goes, and the peers").

    .venv/bin/python tools/bench_peers.py --scale large [--rounds 5] [--threads 1 2]
                                          [--tree new=. --tree old=../main] [--no-compile]

The same model, batch and update as `spark bench` (sparktrain/train/bench.py: the bench
init, the synthetic batch, plain SGD at BENCH_LR), written in PyTorch as the coder
proof's peer writes it (tools/torch_peer_coder.py: autograd, F.rms_norm,
scaled_dot_product_attention with enable_gqa), its first loss checked against the
project's on the same weights and batch, and run two ways: eager,
and `torch.compile` (Inductor: generated C++ for the CPU). Each round times, one after the
other, every --tree's `run_bench` (a subprocess in that checkout, with its own .venv: N
threads = N worker processes over N shards, one BLAS thread each) and then both PyTorch
peers in this process at N intra-op threads, so all see the same machine state; the
report has the medians of tokens/s and of the per-round ratios to each peer. Needs torch
(the `hf` extra).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
import numpy as np

from sparktrain.core.safeload import load_json
from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES
from sparktrain.train.bench import BENCH_LR, BENCH_SEED, DEFAULT_BATCH, WARMUP_STEPS, synthetic_batch

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    import torch
    import torch.nn.functional as F
    from torch_peer_coder import logits_of, rope_tables
except ImportError:  # checked in main(), so --help works without it
    torch = None


def loss_fn(W, cfg, inputs, targets, cos, sin):
    """The coder peer's model (F.rms_norm, SDPA with enable_gqa) and its mean loss."""
    logits = logits_of(W, inputs, cfg, cos, sin)                        # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))

SPARK_SNIPPET = """
import json, sys
from sparktrain import runtime
runtime.start()
from sparktrain.train.bench import run_bench
r = run_bench({scale!r}, {batch}, {steps}, shards={workers}, workers={workers})
print(json.dumps({{"tokens_per_s": r["tokens_per_s"], "params_sha256": r["params_sha256"]}}))
"""


def spark_round(tree: Path, scale: str, batch: int, steps: int, workers: int) -> dict:
    """One `run_bench` in the checkout `tree`, with that checkout's interpreter."""
    python = tree / ".venv" / "bin" / "python"
    code = SPARK_SNIPPET.format(scale=scale, batch=batch, steps=steps, workers=workers)
    env = dict(os.environ, SPARK_BLAS_THREADS="1")
    out = subprocess.run([str(python), "-c", code], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout
    return load_json(out.strip().splitlines()[-1], "spark bench's line")


class TorchPeer:
    """The bench step in PyTorch at `threads` intra-op threads, eager or compiled."""

    def __init__(self, scale: str, batch: int, threads: int, compiled: bool):
        torch.set_num_threads(threads)
        self.cfg = cfg = SCALES[scale]
        model = build_model(cfg)
        host = model.init_params(BENCH_SEED, b"bench")
        b = synthetic_batch(batch, cfg.seq_len, vocab=cfg.vocab)
        spark_loss = model.batch_loss(host, b)[0] / b.n_counted        # the same model's loss
        self.W = {n: torch.tensor(a, requires_grad=True) for n, a in host.items()}
        self.inputs, self.targets = torch.tensor(b.inputs), torch.tensor(b.targets)
        self.cos, self.sin = rope_tables(cfg.seq_len, cfg.head_dim)
        self.threads, self.tokens = threads, batch * cfg.seq_len
        if compiled:  # Inductor bakes the thread count into its kernels: compile afresh
            torch._dynamo.reset()
        self.loss = torch.compile(loss_fn) if compiled else loss_fn
        t0 = time.perf_counter()
        first = self.step()  # compiles here
        self.time(WARMUP_STEPS - 1)
        self.warmup_s = time.perf_counter() - t0
        self.loss_rel_diff = abs(first - spark_loss) / spark_loss  # the two models agree

    def step(self) -> float:
        loss = self.loss(self.W, self.cfg, self.inputs, self.targets, self.cos, self.sin)
        loss.backward()
        with torch.no_grad():
            for p in self.W.values():
                p -= BENCH_LR * p.grad
                p.grad = None
        return float(loss.detach())  # the same host read as spark bench's logged loss

    def time(self, steps: int) -> float:
        """tokens/s: the median step of `steps`."""
        torch.set_num_threads(self.threads)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self.step()
            times.append(time.perf_counter() - t0)
        return self.tokens / float(np.median(times))


def compare(scale: str, trees: dict[str, Path], threads: int, rounds: int, steps: int,
            batch: int, compiled: bool, progress) -> dict:
    peers = {"torch eager + SDPA": TorchPeer(scale, batch, threads, False)}
    if compiled:
        peers["torch.compile"] = TorchPeer(scale, batch, threads, True)
        progress(f"torch.compile warm-up (compiling) {peers['torch.compile'].warmup_s:.0f} s")
    runs: dict[str, list[float]] = {name: [] for name in [*trees, *peers]}
    hashes: dict[str, set] = {name: set() for name in trees}
    for r in range(rounds):
        for name, tree in trees.items():
            out = spark_round(tree, scale, batch, steps, threads)
            runs[name].append(out["tokens_per_s"])
            hashes[name].add(out["params_sha256"])
        for name, peer in peers.items():
            runs[name].append(peer.time(steps))
        progress(f"{scale} {threads} thread(s) round {r + 1}/{rounds}: " + ", ".join(
            f"{n} {v[-1]:,.0f}" for n, v in runs.items()))
    medians = {n: float(np.median(v)) for n, v in runs.items()}
    ratios = {f"{a} / {b}": float(np.median(np.array(runs[a]) / np.array(runs[b])))
              for a in runs for b in runs if a != b and (a in trees)}
    return {"scale": scale, "threads": threads, "batch_size": batch, "rounds": rounds,
            "steps": steps, "tokens_per_s": medians, "ratios": ratios, "runs": runs,
            "spark_params_sha256": {n: sorted(h) for n, h in hashes.items()},
            "first_loss_rel_diff": {n: p.loss_rel_diff for n, p in peers.items()},
            "torch": torch.__version__, "load_before": os.getloadavg()[0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="large", choices=sorted(SCALES))
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=10, help="timed steps a round (default 10)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                    help="PyTorch threads = spark workers (and shards); default 1 2")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                    help="a checkout whose `spark bench` to time (default: this one)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--json", default=None, help="also write the records to this file")
    args = ap.parse_args(argv)
    if torch is None:
        print("bench_peers: error: needs torch: pip install -e '.[hf]'", file=sys.stderr)
        return 2
    if min(args.threads) < 1 or args.rounds < 1 or args.steps < 1:
        print("bench_peers: error: --threads, --rounds and --steps must be positive",
              file=sys.stderr)
        return 2
    trees = {}
    for spec in args.tree or [f"spark={Path(__file__).resolve().parents[1]}"]:
        label, sep, path = spec.partition("=")
        if not sep or not (Path(path) / ".venv" / "bin" / "python").exists():
            print(f"bench_peers: error: --tree {spec!r}: give LABEL=PATH of a checkout with "
                  f"its .venv (make setup)", file=sys.stderr)
            return 2
        trees[label] = Path(path).resolve()
    batch = args.batch_size or DEFAULT_BATCH.get(args.scale, 16)
    say = lambda line: print(f"[peers] {line}", file=sys.stderr, flush=True)  # noqa: E731
    records = [compare(args.scale, trees, t, args.rounds, args.steps, batch,
                       not args.no_compile, say) for t in args.threads]
    for r in records:
        print(f"{r['scale']}, batch {r['batch_size']}, {r['threads']} thread(s) / worker(s), "
              f"median of {r['rounds']} interleaved rounds (load {r['load_before']:.1f}):")
        for name, v in r["tokens_per_s"].items():
            print(f"  {name:22s} {v:10,.0f} tokens/s")
        for name, v in r["ratios"].items():
            print(f"  {name:40s} {v:6.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
