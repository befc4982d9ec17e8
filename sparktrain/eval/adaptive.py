"""The score-first adaptive score of a corpus model (docs/training.md "The adaptive score"):
the held-out stream in order, each batch of windows scored with the weights as they are, then
one AdamW step on that same batch, as a compressor adapts to a file while it codes it. The
stored weights never change: the steps go to a copy."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from sparktrain.data.base import bits_per_byte
from sparktrain.data.corpus import stream_batches
from sparktrain.params import StepConfig
from sparktrain.train.optim import clip_scale, grad_norm, make_optimizer

ADAPT_CLIP = 1.0  # the global-norm clip of each adapting step


@dataclass(frozen=True)
class AdaptiveScore:
    bpb: float
    nats: float       # summed over every held-out target, each scored before any step on it
    targets: int
    steps: int
    seconds: float    # wall time of the whole pass (scoring and stepping): its cost


def adaptive_score(model, params, stream, seq_len: int, batch_size: int, lr: float,
                   byte_lengths: np.ndarray, pad: int) -> AdaptiveScore:
    """Non-overlapping windows of `stream` in order, `batch_size` a step."""
    t0 = time.perf_counter()
    work = {n: a.copy() for n, a in params.items()}
    names = list(work)
    optimizer = make_optimizer(StepConfig(optimizer="adamw", lr=lr, momentum=0.0), work, names)
    total, count, nbytes, steps = 0.0, 0, 0, 0
    for batch in stream_batches(stream, seq_len, batch_size, pad):
        n = batch.n_counted
        if not n:
            continue
        loss, grads = model.loss_and_grads(work, batch)   # scored first: the mean over n
        total += loss * n
        count += n
        nbytes += int(byte_lengths[batch.targets[batch.mask > 0]].sum())
        optimizer.update(work, grads, lr, clip_scale(grad_norm(grads, names), ADAPT_CLIP))
        steps += 1
    return AdaptiveScore(bits_per_byte(total, nbytes), total, count, steps,
                         time.perf_counter() - t0)
