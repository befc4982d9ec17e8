"""Optimizers and the learning-rate schedule, keyed by the safetensors names.

`sgd` is heavy-ball SGD, the seed's contract (`v = momentum v + g`,
`w -= lr v`); `adamw` is Adam with decoupled weight decay (Loshchilov &
Hutter), bias-corrected moments, decay on matrices only (norm weights are
scales, not features); `muon` orthogonalises the momentum of each hidden
matrix (the layers' q, k, v, o and MLP weights) by a Newton-Schulz iteration
(Keller Jordan's Muon, in torch.optim.Muon's conventions) and keeps AdamW, at
its own rate `adam_lr`, for the embedding, the LM head and the norm weights.
The schedule is constant, a linear warm-up then a cosine decay to `min_lr`
(nanoGPT's get_lr), or warm-up / stable / decay (`wsd`: the rate held at `lr`,
then a linear cool-down to `min_lr` over the last `cooldown` fraction of the
micro-steps). Every optimizer's state is a dict of arrays under the parameter
names plus a step count, so a resumed run continues bit for bit.

The state lives where the params live (numpy, or a GPU library's arrays:
model/backend.py, docs/gpu.md); `state()` hands back those arrays, so the
caller brings them to the host to save them, and `load_state` takes host arrays.
`grad_norm` and `clip_scale` are the global-norm clipping; `clipped_update` is a
micro-step's whole update after its gradients (clip, optimizer, schedule), as
the loop applies it and `spark bench --optimizer/--params` times it (JobUpdate).
"""
from __future__ import annotations

import math

import numpy as np

from sparktrain.model import backend

ADAM_EPS = 1e-8
# Muon (torch.optim.Muon's defaults): the quintic Newton-Schulz coefficients, its
# steps, and the floor of the Frobenius norm the update is divided by
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
MUON_EPS = 1e-7
HIDDEN = "spark.layers."  # the hidden matrices Muon trains are the layers' ones


def cooldown_steps(step, total: int) -> int:
    """Micro-steps of the wsd schedule's linear cool-down: the last `cooldown` of them."""
    return int(round(step.cooldown * total))


def lr_at(step, t: int, total: int) -> float:
    """The learning rate of micro-step t (0-based) of `total`."""
    if step.schedule == "constant":
        return step.lr
    if t < step.warmup:
        return step.lr * (t + 1) / step.warmup
    if step.schedule == "wsd":
        decay = cooldown_steps(step, total)
        into = t - (total - decay)  # >= 0 inside the cool-down
        if into < 0:
            return step.lr
        return step.lr + (step.min_lr - step.lr) * min((into + 1) / decay, 1.0)
    span = max(total - step.warmup, 1)
    progress = min((t - step.warmup) / span, 1.0)
    return step.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (step.lr - step.min_lr)


def grad_norm(grads: dict, names) -> float:
    """The global L2 norm of the gradients of `names` (one host sync on a device)."""
    return backend.of_params(grads).global_norm([grads[n] for n in names])


def clip_scale(norm: float, clip: float) -> float:
    """The factor that brings a gradient of global norm `norm` down to `clip` (0: no clipping)."""
    return clip / norm if clip > 0 and norm > clip else 1.0


class SGD:
    name = "sgd"

    def __init__(self, params: dict, names, step):
        self.momentum = step.momentum
        self.be = backend.of_params(params)
        self.velocity = {n: self.be.zeros(params[n].shape, params[n]) for n in names}

    def update(self, params: dict, grads: dict, lr: float, scale: float) -> None:
        f32 = self.be.f32
        for n, v in self.velocity.items():
            v *= self.momentum  # a Python float, exactly as the seed loop multiplied
            # g * 1.0 == g exactly: an unclipped step skips the product and its temporary
            v += grads[n] if scale == 1.0 else grads[n] * f32(scale)
            params[n] -= f32(lr) * v

    def state(self) -> dict[str, np.ndarray]:
        return {f"velocity.{n}": v for n, v in self.velocity.items()}

    def load_state(self, tensors: dict) -> None:
        for n in self.velocity:
            self.velocity[n] = self.be.load(self.velocity[n], tensors[f"velocity.{n}"])


class AdamW:
    name = "adamw"

    def __init__(self, params: dict, names, step):
        self.b1, self.b2, self.wd = step.beta1, step.beta2, step.weight_decay
        self.be = be = backend.of_params(params)
        self.m = {n: be.zeros(params[n].shape, params[n]) for n in names}
        self.v = {n: be.zeros(params[n].shape, params[n]) for n in names}
        self.decayed = {n for n in names if params[n].ndim >= 2}
        self.t = 0

    def update(self, params: dict, grads: dict, lr: float, scale: float) -> None:
        self.t += 1
        f32, xp = self.be.f32, self.be.xp
        c1 = f32(1.0 - self.b1 ** self.t)
        c2 = f32(1.0 - self.b2 ** self.t)
        b1, b2 = np.float32(self.b1), np.float32(self.b2)
        one_b1, one_b2 = f32(1 - b1), f32(1 - b2)   # rounded in float32, as before
        b1, b2, lr32, eps = f32(b1), f32(b2), f32(lr), f32(ADAM_EPS)
        for n, m in self.m.items():
            g = grads[n] if scale == 1.0 else grads[n] * f32(scale)  # exact either way
            v = self.v[n]
            m *= b1
            m += one_b1 * g
            v *= b2
            v += one_b2 * (g * g)
            if n in self.decayed and self.wd:
                params[n] *= f32(1.0 - lr * self.wd)
            params[n] -= lr32 * (m / c1) / (xp.sqrt(v / c2) + eps)

    def state(self) -> dict[str, np.ndarray]:
        out = {f"m.{n}": a for n, a in self.m.items()}
        out.update({f"v.{n}": a for n, a in self.v.items()})
        out["t"] = np.array([self.t], dtype=np.float32)  # exact below 2**24 steps
        return out

    def load_state(self, tensors: dict) -> None:
        for n in self.m:
            self.m[n] = self.be.load(self.m[n], tensors[f"m.{n}"])
            self.v[n] = self.be.load(self.v[n], tensors[f"v.{n}"])
        self.t = int(tensors["t"][0])


def orthogonalise(be, g):
    """Newton-Schulz's quintic iteration towards the nearest semi-orthogonal matrix
    of g (m, n), as torch.optim.Muon's _zeropower_via_newtonschulz, in float32
    where torch works in bfloat16: g / max(|g|_F, eps), the wide way round (rows <=
    columns), NS_STEPS times X <- a X + (b A + c A A) X with A = X X^T."""
    a, b, c = (be.f32(k) for k in NS_COEFFICIENTS)
    tall = g.shape[0] > g.shape[1]
    x = be.mT(g) if tall else g                                    # (r, s), r <= s
    x = x / be.f32(max(be.global_norm([x]), MUON_EPS))
    for _ in range(NS_STEPS):
        gram = x @ be.mT(x)                                        # (r, r)
        x = a * x + (b * gram + c * (gram @ gram)) @ x             # (r, s)
    return be.mT(x) if tall else x


class Muon:
    """Muon on the hidden matrices, AdamW (its own rate) on everything else.

    Per hidden matrix W (out, in), as torch.optim.Muon with nesterov=True:
      B <- B + (1 - mu) (g - B)          the momentum, an average (torch's lerp)
      U <- g + mu (B - g)                 Nesterov's look-ahead
      W <- W (1 - lr wd) - lr sqrt(max(1, out/in)) orthogonalise(U)
    The averaged momentum is (1 - mu) times the summed one of Keller Jordan's
    post (B <- mu B + g); the Frobenius normalisation cancels that factor.
    """
    name = "muon"

    def __init__(self, params: dict, names, step):
        self.mu, self.wd, self.lr = step.muon_momentum, step.weight_decay, step.lr
        self.adam_lr = step.adam_lr_or_default()
        self.be = be = backend.of_params(params)
        self.hidden = [n for n in names if n.startswith(HIDDEN) and params[n].ndim == 2]
        self.buf = {n: be.zeros(params[n].shape, params[n]) for n in self.hidden}
        self.adam = AdamW(params, [n for n in names if n not in self.buf], step)

    def update(self, params: dict, grads: dict, lr: float, scale: float) -> None:
        f32 = self.be.f32
        mu, one_mu = f32(self.mu), f32(1.0 - self.mu)
        for n, buf in self.buf.items():
            g = grads[n] if scale == 1.0 else grads[n] * f32(scale)
            buf += one_mu * (g - buf)
            o = orthogonalise(self.be, g + mu * (buf - g))
            rows, cols = o.shape
            if self.wd:
                params[n] *= f32(1.0 - lr * self.wd)
            params[n] -= f32(lr * math.sqrt(max(1.0, rows / cols))) * o
        # the AdamW group follows the same schedule, at adam_lr where Muon is at lr
        self.adam.update(params, grads, lr * self.adam_lr / self.lr, scale)

    def state(self) -> dict[str, np.ndarray]:
        out = {f"momentum.{n}": b for n, b in self.buf.items()}
        out.update(self.adam.state())
        return out

    def load_state(self, tensors: dict) -> None:
        for n in self.buf:
            self.buf[n] = self.be.load(self.buf[n], tensors[f"momentum.{n}"])
        self.adam.load_state(tensors)


OPTIMIZERS = {"sgd": SGD, "adamw": AdamW, "muon": Muon}


def make_optimizer(step, params: dict, names):
    return OPTIMIZERS[step.optimizer](params, names, step)


def clipped_update(optimizer, step, params: dict, grads: dict, names, t: int, total: int,
                   check=None) -> tuple[float, float]:
    """Micro-step t (0-based) of `total` after its gradients: the global-norm clip,
    then the optimizer at the schedule's rate; (gradient norm before clipping, the
    clip's scale). `check(norm)` may refuse the norm before anything changes."""
    norm = grad_norm(grads, names)
    if check is not None:
        check(norm)
    scale = clip_scale(norm, step.clip)
    optimizer.update(params, grads, lr_at(step, t, total), scale)
    return norm, scale


class JobUpdates:
    """Makes a job's JobUpdate for given params (`spark bench` makes one per run)."""

    def __init__(self, step, total: int):
        self.step, self.total = step, total
        knobs = f"lr {step.lr:g}, clip {step.clip:g}"
        if step.optimizer == "muon":
            knobs += f", adam_lr {step.adam_lr_or_default():g}"
        if step.schedule == "cosine":
            knobs += f", cosine after {step.warmup} warm-up"
        if step.schedule == "wsd":
            knobs += f", wsd: {step.warmup} warm-up, cool-down {step.cooldown:g}"
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
        return clipped_update(self.optimizer, self.step, params, grads, self.names, t,
                              self.total)[0]
