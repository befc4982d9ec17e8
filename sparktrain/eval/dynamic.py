"""Dynamic evaluation of a corpus model (docs/training.md "Dynamic evaluation"): the model
keeps learning while it codes the held-out stream, as a compressor updates its statistics
after every byte it codes (Krause et al. 2018, arXiv 1709.07432; 2019, arXiv 1904.08378).

The stream is cut into pieces of `stride` tokens, in order. Each piece is scored in a window
of seq_len tokens that ends with it (the context before it, as the sliding score sees it),
by the full softmax of the weights as they are; then one update on that piece's loss. So
every token is scored exactly once, by weights that have seen only the tokens before it: a
score that is fair to compare with a compressor's. The stored weights never change: the
updates go to a copy, and each decays back towards the trained weights.

The update rules (`rule`):
- rms: Krause's RMS-normalised SGD, each tensor's step divided by the root of its mean
  squared gradient on pieces of the train split (floored at a tenth of the tensor's mean),
  and a decay towards the trained weights
  scaled per element by that root over its mean (capped at 1);
- sgd: plain SGD, the decay the same for every element;
- adamw: AdamW from a fresh state, the decay as sgd's.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.core.progress import Progress
from sparktrain.data.base import bits_per_byte
from sparktrain.data.corpus import sliding_batches
from sparktrain.model import backend
from sparktrain.params import DYNAMIC_RULES, StepConfig
from sparktrain.train.optim import make_optimizer


RMS_EPS = 1e-12      # keeps a tensor whose every gradient was zero finite
# an element's root mean square is floored at this part of its tensor's mean root: an
# embedding row of a token the train pieces never held has none, and lr / 0 would throw it
# far on the first piece that holds the token
RMS_FLOOR = 0.1
MS_PIECES = 256      # train pieces whose gradients give the rms rule its mean squares
PROGRESS_STEPS = 10  # a progress line (or the bar's move) a tenth of the stream


@dataclass(frozen=True)
class DynamicSettings:
    rule: str
    lr: float
    decay: float      # the pull back towards the trained weights, per update
    stride: int       # tokens a piece: scored, then learned from


@dataclass(frozen=True)
class DynamicScore:
    bpb: float
    nats: float       # summed over every held-out target, each scored before any update on it
    targets: int
    updates: int
    seconds: float    # wall time of the pass (scoring and learning), its cost; not recorded

    def record(self, settings: DynamicSettings) -> dict:
        """What a report keeps: the score's settings and count of updates (no timing)."""
        return {"rule": settings.rule, "lr": settings.lr, "decay": settings.decay,
                "stride": settings.stride, "updates": self.updates}


def pieces(stream, seq_len: int, stride: int, pad: int):
    """The held-out stream's pieces in order, one window each (sliding_batches, one a batch)."""
    return sliding_batches(stream, seq_len, stride, 1, pad)


def mean_squares(model, params, stream, seq_len: int, stride: int, pad: int,
                 n_pieces: int = MS_PIECES) -> dict:
    """Each tensor's mean squared gradient over `n_pieces` pieces spread evenly over `stream`
    (the train split): the rms rule's per-element scale, measured on pieces as the update
    sees them (one window, its last `stride` targets)."""
    windows = max((len(stream) - 1 - seq_len) // stride, 1)
    step = max(windows // n_pieces, 1)
    sums, count = None, 0
    for i, batch in enumerate(pieces(stream, seq_len, stride, pad)):
        if i % step or count == n_pieces:
            continue
        _, _, grads = model.scores_and_grads(params, batch)
        sums = {n: g * g for n, g in grads.items()} if sums is None else \
            {n: sums[n] + grads[n] * grads[n] for n in sums}
        count += 1
    if not count:
        raise SparkError("the train split has no piece to measure the rms rule's scale on")
    return {n: s / np.float32(count) for n, s in sums.items()}


class Learner:
    """One update a piece on a copy of the weights, by `settings.rule`, decaying towards
    the trained weights."""

    def __init__(self, params: dict, settings: DynamicSettings, ms: dict | None = None):
        if settings.rule not in DYNAMIC_RULES:
            raise SparkError(f"dynamic rule {settings.rule!r} is not one of "
                             f"{', '.join(DYNAMIC_RULES)}")
        self.settings = s = settings
        be = backend.of_params(params)
        self.trained = params
        self.work = {n: a.copy() for n, a in params.items()}
        # each tensor's step size (sgd: lr; rms: lr over its root mean square; adamw: its own)
        # and its pull back towards the trained weights (decay; rms: scaled per element)
        self.scale = {n: be.f32(s.lr) for n in params} if s.rule == "sgd" else {}
        self.pull = {n: be.f32(s.decay) for n in params}
        if s.rule == "rms":
            if ms is None:
                raise SparkError("the rms rule needs the train split's mean squared gradients")
            roots = {n: be.xp.sqrt(m) for n, m in ms.items()}
            mean_root = sum(float(be.xp.sum(r)) for r in roots.values()) / \
                sum(int(np.prod(r.shape)) for r in roots.values())
            cap = 1.0 / s.decay if s.decay else 0.0
            for n, r in roots.items():
                floor = be.f32(RMS_FLOOR * float(be.xp.mean(r)) + RMS_EPS)
                self.scale[n] = be.f32(s.lr) / be.xp.maximum(r, floor)
                # decay rate relative to the mean root, so that lamb * rate <= 1 (Krause)
                rel = r / be.f32(max(mean_root, RMS_EPS))
                self.pull[n] = be.f32(s.decay) * (be.xp.minimum(rel, be.f32(cap)) if cap else rel)
        self.adam = make_optimizer(StepConfig(optimizer="adamw", lr=s.lr, momentum=0.0,
                                              weight_decay=0.0), self.work, list(self.work)) \
            if s.rule == "adamw" else None

    def update(self, grads: dict) -> None:
        if self.adam is not None:
            self.adam.update(self.work, grads, self.settings.lr, 1.0)
        for n, w in self.work.items():
            if n in self.scale:
                w -= self.scale[n] * grads[n]
            if self.settings.decay:
                w += self.pull[n] * (self.trained[n] - w)


def _scored(model, params, batch) -> tuple[np.ndarray, dict]:
    """(each counted target's CE in nats, host float64 in order; the mean's gradient)."""
    nll, weights, grads = model.scores_and_grads(params, batch)
    be = backend.of(nll)
    return be.to_host(nll).astype(np.float64)[be.to_host(weights) > 0], grads


def dynamic_score(model, params, stream, seq_len: int, settings: DynamicSettings,
                  byte_lengths: np.ndarray, pad: int, ms: dict | None = None,
                  on_piece: Callable[[np.ndarray], None] | None = None) -> DynamicScore:
    """Score `stream` piece by piece, learning from each piece after it is scored.
    `on_piece(nats)` receives each piece's per-token scores in order (the fairness tests)."""
    if settings.stride > seq_len or settings.stride < 1:
        raise SparkError(f"dynamic stride {settings.stride} must be in [1, seq_len {seq_len}]")
    t0 = time.perf_counter()
    learner = Learner(params, settings, ms)
    total, count, nbytes, updates = 0.0, 0, 0, 0
    # a diverging rate is one line below, not numpy's overflow warnings before it
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for batch in pieces(stream, seq_len, settings.stride, pad):
            if not batch.n_counted:
                continue
            nats, grads = _scored(model, learner.work, batch)             # scored first
            if on_piece is not None:
                on_piece(nats)
            total += float(nats.sum())
            if not math.isfinite(total):
                raise SparkError(f"the dynamic score is not finite after {updates:,} updates "
                                 f"(rule {settings.rule}, lr {settings.lr:g}): lower "
                                 f"eval.dynamic_lr")
            count += len(nats)
            nbytes += int(byte_lengths[batch.targets[batch.mask > 0]].sum())
            learner.update(grads)                                       # then learned from
            updates += 1
    return DynamicScore(bits_per_byte(total, nbytes), total, count, updates,
                        time.perf_counter() - t0)


def heldout_dynamic(model, params, data, tokenizer, seq_len: int, eval_cfg, stride: int) -> dict:
    """The dynamic score of a prepared corpus's held-out stream (data/heldout.py asks), its
    settings from eval (the piece: eval.dynamic_stride, else the sliding `stride`), the rms
    rule's scale measured on the train split; progress shown, its cost printed, never
    recorded: {"bpb", "targets", "record"}."""
    settings = DynamicSettings(eval_cfg.dynamic_rule, eval_cfg.dynamic_lr,
                               eval_cfg.dynamic_decay, eval_cfg.dynamic_stride or stride)
    ms = mean_squares(model, params, data.train, seq_len, settings.stride, tokenizer.eos) \
        if settings.rule == "rms" else None
    total, shown = max(len(data.val) - 1, 1), [0, 0]  # targets scored, tenths shown

    with Progress("dynamic evaluation", PROGRESS_STEPS, unit="tenths") as bar:
        def on_piece(nats):
            shown[0] += len(nats)
            while shown[1] < PROGRESS_STEPS * shown[0] // total:
                shown[1] += 1
                bar.advance()

        got = dynamic_score(model, params, data.val, seq_len, settings,
                            tokenizer.byte_lengths(), tokenizer.eos, ms, on_piece)
        bar.log(f"dynamic evaluation: {got.updates:,} updates ({settings.rule}, lr "
                f"{settings.lr:g}, decay {settings.decay:g}, {settings.stride} tokens a piece) "
                f"in {got.seconds:.1f} s")
    return {"bpb": got.bpb, "targets": got.targets, "record": got.record(settings)}
