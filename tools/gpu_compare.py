#!/usr/bin/env python3
"""CPU (numpy) against a GPU on the same training: per-step losses and rerun bytes.

Trains a scale for --steps AdamW (or SGD) micro-steps on a fixed stream of
random full-length batches, with global-norm clipping and the cosine schedule,
once in numpy and twice on the device (docs/gpu.md). Prints one JSON object:
the largest relative loss difference CPU vs device, and whether the two
device runs gave the same weight bytes.

    .venv/bin/python tools/gpu_compare.py --scale large --steps 50
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from types import SimpleNamespace

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
import numpy as np

from sparktrain.train.bench import synthetic_batch
from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES
from sparktrain.model.device import CPU, resolve
from sparktrain.train.optim import clip_scale, grad_norm, lr_at, make_optimizer


def train(dev, cfg, steps, optimizer, batch_size):
    model = build_model(cfg)
    params = dev.to_device(model.init_params(0, b"gpu-compare"))
    step = SimpleNamespace(optimizer=optimizer, momentum=0.9, beta1=0.9, beta2=0.95,
                           weight_decay=0.1, schedule="cosine", lr=3e-3, min_lr=3e-4,
                           warmup=max(steps // 10, 1), clip=1.0)
    opt = make_optimizer(step, params, list(params))
    losses = []
    for t in range(steps):
        batch = synthetic_batch(batch_size, cfg.seq_len, seed=1000 + t)
        loss, grads = model.loss_and_grads(params, batch)
        opt.update(params, grads, lr_at(step, t, steps), clip_scale(grad_norm(grads, params),
                                                                    step.clip))
        losses.append(loss)
    digest = hashlib.sha256(b"".join(a.tobytes() for a in dev.to_host(params).values()))
    return losses, digest.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="large", choices=sorted(SCALES))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    args = ap.parse_args()
    dev = resolve(args.device)
    cfg = SCALES[args.scale]
    cpu, _ = train(CPU, cfg, args.steps, args.optimizer, args.batch_size)
    (gpu1, sha1), (gpu2, sha2) = (train(dev, cfg, args.steps, args.optimizer, args.batch_size)
                                  for _ in range(2))
    rel = [abs(a - b) / abs(a) for a, b in zip(cpu, gpu1)]
    print(json.dumps({"scale": args.scale, "device": dev.name, "optimizer": args.optimizer,
                      "steps": args.steps, "loss_first": cpu[0], "loss_last_cpu": cpu[-1],
                      "loss_last_device": gpu1[-1], "max_rel_loss_diff": max(rel),
                      "rerun_same_bytes": sha1 == sha2 and gpu1 == gpu2}, sort_keys=True))
    return 0 if max(rel) < 1e-4 and sha1 == sha2 else 1


if __name__ == "__main__":
    sys.exit(main())
