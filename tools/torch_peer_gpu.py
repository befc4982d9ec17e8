#!/usr/bin/env python3
"""The PyTorch peer of `spark bench --device`: the same model, batch and SGD step
written in PyTorch eager with autograd and SDPA attention, timed the same way
(docs/gpu.md). Prints one JSON object: tokens/s, and its first loss next to
this project's on the same weights and batch (the two models must agree).

    .venv/bin/python tools/torch_peer_gpu.py --scale gpu [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
import numpy as np
import torch
import torch.nn.functional as F

from sparktrain.train.bench import (BENCH_LR, BENCH_SEED, DEFAULT_BATCH, WARMUP_STEPS,
                                    synthetic_batch)
from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES, layer_names
from sparktrain.model.device import resolve
from sparktrain.model.layers import RMS_EPS, ROPE_BASE


def rms(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * w


def rope(u, cos, sin):
    """u (B, heads, T, hd): pairs (u_i, u_{i+hd/2}) rotated, as layers.rope_forward."""
    half = u.shape[-1] // 2
    u1, u2 = u[..., :half], u[..., half:]
    return torch.cat([u1 * cos - u2 * sin, u2 * cos + u1 * sin], dim=-1)


def loss_fn(W, cfg, inputs, targets, cos, sin):
    B, T = inputs.shape
    H, KV, hd, C = cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.dim
    x = W["spark.embed.weight"][inputs]                                 # (B, T, C)
    for L in range(cfg.n_layer):
        w = {k: W[n] for k, n in layer_names(L).items()}
        h = rms(x, w["attn_norm"])
        q = (h @ w["q"].T).view(B, T, H, hd).transpose(1, 2)            # (B, H, T, hd)
        k = (h @ w["k"].T).view(B, T, KV, hd).transpose(1, 2)           # (B, KV, T, hd)
        v = (h @ w["v"].T).view(B, T, KV, hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)     # (B, H, T, hd)
        x = x + y.transpose(1, 2).reshape(B, T, C) @ w["o"].T
        h = rms(x, w["mlp_norm"])
        x = x + (F.silu(h @ w["mlp_gate"].T) * (h @ w["mlp_up"].T)) @ w["mlp_down"].T
    logits = rms(x, W["spark.final_norm.weight"]) @ W["spark.lm_head.weight"].T
    return F.cross_entropy(logits.reshape(B * T, -1).float(), targets.reshape(-1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="gpu", choices=sorted(SCALES))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    dev = resolve(args.device)
    tdev = torch.device(dev.kind if dev.kind != "cpu" else "cpu")
    cfg = SCALES[args.scale]
    B = args.batch_size or DEFAULT_BATCH.get(args.scale, 16)
    model = build_model(cfg)
    host = model.init_params(BENCH_SEED, b"bench")
    batch = synthetic_batch(B, cfg.seq_len)
    ours = model.batch_loss(dev.to_device(host), batch)[0] / batch.n_counted
    torch.use_deterministic_algorithms(False)  # the peer runs PyTorch's default (fast) kernels

    W = {n: torch.tensor(a, device=tdev, requires_grad=True) for n, a in host.items()}
    inputs = torch.tensor(batch.inputs, device=tdev)
    targets = torch.tensor(batch.targets, device=tdev)
    hd = cfg.head_dim
    freqs = ROPE_BASE ** (-2.0 * np.arange(hd // 2) / hd)
    angle = np.arange(cfg.seq_len)[:, None] * freqs[None, :]
    cos = torch.tensor(np.cos(angle), dtype=torch.float32, device=tdev)
    sin = torch.tensor(np.sin(angle), dtype=torch.float32, device=tdev)

    times, first = [], None
    for i in range(WARMUP_STEPS + args.steps):
        t0 = time.perf_counter()
        loss = loss_fn(W, cfg, inputs, targets, cos, sin)
        loss.backward()
        with torch.no_grad():
            for p in W.values():
                p -= BENCH_LR * p.grad
                p.grad = None
        value = float(loss)          # the same host sync as `spark bench`'s logged loss
        dev.sync()
        if first is None:
            first = value
        if i >= WARMUP_STEPS:
            times.append(time.perf_counter() - t0)
    step_s = float(np.median(times))
    print(json.dumps({
        "peer": "pytorch eager + SDPA", "torch": torch.__version__, "scale": args.scale,
        "device": dev.name, "batch_size": B, "seq_len": cfg.seq_len, "steps": args.steps,
        "median_step_s": step_s, "tokens_per_s": B * cfg.seq_len / step_s,
        "first_loss": first, "spark_first_loss": ours,
        "first_loss_rel_diff": abs(first - ours) / ours}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
