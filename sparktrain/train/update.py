"""A training micro-step after its gradients: the global-norm clip, the
optimizer and the learning-rate schedule, as the training loop applies them
(docs/training.md). `spark bench --optimizer/--params` times exactly this.
"""
from __future__ import annotations

from sparktrain.train.optim import clip_scale, grad_norm, lr_at, make_optimizer


class JobUpdates:
    """Makes a job's JobUpdate for given params (`spark bench` makes one per run)."""

    def __init__(self, step, total: int):
        self.step, self.total = step, total
        knobs = f"lr {step.lr:g}, clip {step.clip:g}"
        if step.schedule == "cosine":
            knobs += f", cosine after {step.warmup} warm-up"
        self.label = f"{step.optimizer} ({knobs})"

    def __call__(self, params: dict) -> "JobUpdate":
        return JobUpdate(self.step, params, params, self.total)


class JobUpdate:
    """`update(params, grads, t)`: micro-step t (0-based) of `total` of a job's step knobs."""

    def __init__(self, step, params: dict, names, total: int):
        self.step, self.names, self.total = step, list(names), total
        self.optimizer = make_optimizer(step, params, self.names)

    def __call__(self, params: dict, grads: dict, t: int) -> float:
        """Apply it; the gradient norm before clipping."""
        norm = grad_norm(grads, self.names)
        self.optimizer.update(params, grads, lr_at(self.step, t, self.total),
                              clip_scale(norm, self.step.clip))
        return norm
