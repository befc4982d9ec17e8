"""The optimizers (heavy-ball SGD, AdamW, Muon), lr schedules and the global-norm clip, keyed
by safetensors names (docs/training.md "Optimizers"); state lives where the params live,
`load_state` takes host arrays, so a resumed run continues bit for bit."""
from __future__ import annotations

import math

import numpy as np

from sparktrain.model import backend
from sparktrain.model.config import BIGRAM
from sparktrain.params import OPTIMIZERS, cooldown_steps

ADAM_EPS = 1e-8
# Muon (torch.optim.Muon's defaults): Newton-Schulz's coefficients and steps, the norm floor
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
MUON_EPS = 1e-7
# step.muon_ns: polar: Polar Express (Amsel, Persson, Musco, Gower 2025, arXiv 2505.16932),
# one (a, b, c) a step, fitted for 5 steps with a 2 % safety factor on the input's norm, the
# schedule the speedrun (KellerJordan/modded-nanogpt) uses
POLAR_EXPRESS = ((8.156554524902461, -22.48329292557795, 15.878769915207462),
                 (4.042929935166739, -2.808917465908714, 0.5000178451051316),
                 (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
                 (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
                 (2.3465413258596377, -1.7097828382687081, 0.42323551169305323))
POLAR_SAFETY = 1.02
# step.normuon: NorMuon (Li et al. 2025, arXiv 2510.05491; the speedrun's form): the decay of
# the running second moment of the orthogonalised update (the paper's 0.95), and its floor
NORMUON_BETA2 = 0.95
NORMUON_EPS = 1e-10
HIDDEN = "spark.layers."  # the hidden matrices Muon trains are the layers' ones
EMBED_TABLES = ("spark.embed.weight", BIGRAM)  # looked up by id: step.embed_lr's tensors


def lr_at(step, t: int, total: int) -> float:
    """The learning rate of micro-step t (0-based) of `total`."""
    if step.schedule == "constant":
        return step.lr
    if t < step.warmup:
        return step.lr * (t + 1) / step.warmup
    if step.schedule == "wsd":
        decay = cooldown_steps(step.cooldown, total)  # the linear cool-down's micro-steps
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
    def __init__(self, params: dict, names, step):
        self.momentum = step.momentum
        self.be = backend.of_params(params)
        self.velocity = {n: self.be.zeros(params[n].shape, params[n]) for n in names}

    def update(self, params: dict, grads: dict, lr: float, scale: float) -> None:
        f32 = self.be.f32
        for n, v in self.velocity.items():
            v *= self.momentum  # the Python float itself: the weights' bytes are of this product
            # g * 1.0 == g exactly: an unclipped step skips the product and its temporary
            v += grads[n] if scale == 1.0 else grads[n] * f32(scale)
            params[n] -= f32(lr) * v

    def state(self) -> dict[str, np.ndarray]:
        return {f"velocity.{n}": v for n, v in self.velocity.items()}

    def check_state(self, tensors: dict, steps: int) -> None:
        """A saved state this optimizer could have after `steps` updates, else ValueError."""

    def load_state(self, tensors: dict) -> None:
        for n in self.velocity:
            self.velocity[n] = self.be.load(self.velocity[n], tensors[f"velocity.{n}"])


class AdamW:
    """AdamW at the rate it is given; the embedding tables (EMBED_TABLES) at step.embed_lr /
    group_lr times that when step.embed_lr is set (group_lr: the rate the group stands for,
    step.lr alone, adam_lr under Muon), so they follow the same schedule."""
    def __init__(self, params: dict, names, step, group_lr: float | None = None):
        self.b1, self.b2, self.wd = step.beta1, step.beta2, step.weight_decay
        self.be = be = backend.of_params(params)
        self.m = {n: be.zeros(params[n].shape, params[n]) for n in names}
        self.v = {n: be.zeros(params[n].shape, params[n]) for n in names}
        self.decayed = {n for n in names if params[n].ndim >= 2}
        self.ratio = {} if step.embed_lr is None else {
            n: step.embed_lr / (group_lr or step.lr) for n in names if n in EMBED_TABLES}
        self.t = 0

    def update(self, params: dict, grads: dict, lr: float, scale: float) -> None:
        self.t += 1
        f32, xp = self.be.f32, self.be.xp
        c1 = f32(1.0 - self.b1 ** self.t)
        c2 = f32(1.0 - self.b2 ** self.t)
        b1, b2 = np.float32(self.b1), np.float32(self.b2)
        one_b1, one_b2 = f32(1 - b1), f32(1 - b2)   # 1 - b of the float32 b, in float32
        b1, b2, eps = f32(b1), f32(b2), f32(ADAM_EPS)
        for n, m in self.m.items():
            g = grads[n] if scale == 1.0 else grads[n] * f32(scale)  # exact either way
            v = self.v[n]
            m *= b1
            m += one_b1 * g
            v *= b2
            v += one_b2 * (g * g)
            rate = lr * self.ratio[n] if n in self.ratio else lr
            if n in self.decayed and self.wd:
                params[n] *= f32(1.0 - rate * self.wd)
            params[n] -= f32(rate) * (m / c1) / (xp.sqrt(v / c2) + eps)

    def state(self) -> dict[str, np.ndarray]:
        return {**{f"m.{n}": a for n, a in self.m.items()},
                **{f"v.{n}": a for n, a in self.v.items()},
                "t": np.array([self.t], dtype=np.float32)}  # exact below 2**24 steps

    def check_state(self, tensors: dict, steps: int) -> None:
        """A saved state this optimizer could have after `steps` updates (host arrays), else
        ValueError: its step counter is `steps` and no second moment is negative."""
        counter = tensors["t"].reshape(-1).tolist()
        if counter != [steps]:
            raise ValueError(f"its AdamW step counter {counter[0] if counter else None} is not "
                             f"passes x inner = {steps}")
        if negative := [n for n in self.v if (tensors[f"v.{n}"] < 0).any()]:
            raise ValueError(f"its AdamW second moment v.{negative[0]} has negative values")

    def load_state(self, tensors: dict) -> None:
        for n in self.m:
            self.m[n] = self.be.load(self.m[n], tensors[f"m.{n}"])
            self.v[n] = self.be.load(self.v[n], tensors[f"v.{n}"])
        self.t = int(tensors["t"][0])


def orthogonalise(be, g, ns: str = "jordan"):
    """Newton-Schulz towards the nearest semi-orthogonal matrix of g (m, n), in float32:
    X <- a X + (b A + c A A) X, A = X X^T, wide side; `ns` jordan: torch.optim.Muon's fixed
    (a, b, c), polar: Polar Express's schedule, one (a, b, c) a step (docs/training.md)."""
    tall = g.shape[0] > g.shape[1]
    x = be.mT(g) if tall else g                                    # (r, s), r <= s
    if ns == "polar":
        x = x / be.f32(be.global_norm([x]) * POLAR_SAFETY + MUON_EPS)
        schedule = POLAR_EXPRESS
    else:
        x = x / be.f32(max(be.global_norm([x]), MUON_EPS))
        schedule = (NS_COEFFICIENTS,) * NS_STEPS
    for coefficients in schedule:
        a, b, c = (be.f32(k) for k in coefficients)
        gram = x @ be.mT(x)                                        # (r, r)
        x = a * x + (b * gram + c * (gram @ gram)) @ x             # (r, s)
    return be.mT(x) if tall else x


def normuon_axis(shape) -> int:
    """The axis NorMuon averages over: the shorter side's, so the moment is kept per row of
    a tall or square matrix and per column of a wide one (an orthogonalised wide matrix's
    rows all have norm ~1: per row it would change nothing)."""
    return 1 if shape[0] >= shape[1] else 0


def normuon(be, o, second):
    """NorMuon's step on an orthogonalised update o (m, n): `second`, the running mean of
    o^2 along normuon_axis ((m, 1) or (1, n)), takes this step's in place; returns o with
    each row (column) divided by the root of its moment, rescaled to o's Frobenius norm."""
    xp = be.xp
    second += be.f32(1.0 - NORMUON_BETA2) * (xp.mean(o * o, axis=normuon_axis(o.shape),
                                                     keepdims=True) - second)
    u = o / xp.sqrt(be.at_least(second, NORMUON_EPS))              # (m, n)
    return u * be.f32(be.global_norm([o]) / max(be.global_norm([u]), NORMUON_EPS))


class Muon:
    """Muon (torch.optim.Muon's, nesterov) on hidden matrices, AdamW on the rest, NorMuon's
    normalisation after the orthogonalisation when step.normuon says so (training.md)."""
    def __init__(self, params: dict, names, step):
        self.mu, self.wd, self.lr = step.muon_momentum, step.weight_decay, step.lr
        self.ns = step.muon_ns
        self.adam_lr = step.adam_lr_or_default()
        self.be = be = backend.of_params(params)
        self.hidden = [n for n in names if n.startswith(HIDDEN) and params[n].ndim == 2]
        self.buf = {n: be.zeros(params[n].shape, params[n]) for n in self.hidden}
        # NorMuon's second moments: one a row (a column when wider), (m, 1) or (1, n)
        self.second = {} if not step.normuon else {
            n: be.zeros(tuple(1 if a == normuon_axis(params[n].shape) else k
                              for a, k in enumerate(params[n].shape)), params[n])
            for n in self.hidden}
        self.adam = AdamW(params, [n for n in names if n not in self.buf], step, self.adam_lr)

    def update(self, params: dict, grads: dict, lr: float, scale: float) -> None:
        f32 = self.be.f32
        mu, one_mu = f32(self.mu), f32(1.0 - self.mu)
        for n, buf in self.buf.items():
            g = grads[n] if scale == 1.0 else grads[n] * f32(scale)
            buf += one_mu * (g - buf)
            o = orthogonalise(self.be, g + mu * (buf - g), self.ns)
            if self.second:
                o = normuon(self.be, o, self.second[n])
            rows, cols = o.shape
            if self.wd:
                params[n] *= f32(1.0 - lr * self.wd)
            params[n] -= f32(lr * math.sqrt(max(1.0, rows / cols))) * o
        # the AdamW group follows the same schedule, at adam_lr where Muon is at lr
        self.adam.update(params, grads, lr * self.adam_lr / self.lr, scale)

    def state(self) -> dict[str, np.ndarray]:
        return {**{f"momentum.{n}": b for n, b in self.buf.items()},
                **{f"normuon.{n}": v for n, v in self.second.items()}, **self.adam.state()}

    def check_state(self, tensors: dict, steps: int) -> None:
        self.adam.check_state(tensors, steps)
        if negative := [n for n in self.second if (tensors[f"normuon.{n}"] < 0).any()]:
            raise ValueError(f"its NorMuon second moment normuon.{negative[0]} has negative "
                             "values")

    def load_state(self, tensors: dict) -> None:
        for n in self.buf:
            self.buf[n] = self.be.load(self.buf[n], tensors[f"momentum.{n}"])
        for n in self.second:
            self.second[n] = self.be.load(self.second[n], tensors[f"normuon.{n}"])
        self.adam.load_state(tensors)


# step.optimizer -> its class, in the order of model/config.py OPTIMIZERS
OPTIMIZER_CLASSES = dict(zip(OPTIMIZERS, (SGD, AdamW, Muon), strict=True))


def make_optimizer(step, params: dict, names):
    return OPTIMIZER_CLASSES[step.optimizer](params, names, step)


def clipped_update(optimizer, step, params: dict, grads: dict, names, t: int, total: int,
                   check=None) -> tuple[float, float]:
    """Micro-step t of `total` after its gradients: the clip, then the optimizer at the
    schedule's rate; (norm before clipping, scale). `check(norm)` may refuse the norm."""
    norm = grad_norm(grads, names)
    if check is not None:
        check(norm)
    scale = clip_scale(norm, step.clip)
    optimizer.update(params, grads, lr_at(step, t, total), scale)
    return norm, scale


class JobUpdates:
    """Makes a job's update for given params (`spark bench` makes one per run)."""

    def __init__(self, step, total: int):
        self.step, self.total = step, total
        knobs = f"lr {step.lr:g}, clip {step.clip:g}"
        if step.optimizer == "muon":
            knobs += f", adam_lr {step.adam_lr_or_default():g}"
        if step.embed_lr is not None:
            knobs += f", embed_lr {step.embed_lr:g}"
        if step.schedule == "cosine":
            knobs += f", cosine after {step.warmup} warm-up"
        if step.schedule == "wsd":
            knobs += f", wsd: {step.warmup} warm-up, cool-down {step.cooldown:g}"
        self.label = f"{step.optimizer} ({knobs})"

    def __call__(self, params: dict):
        """The micro-step's `update(params, grads, t)`, which returns the norm before clipping."""
        names = list(params)
        optimizer = make_optimizer(self.step, params, names)
        return lambda params, grads, t: clipped_update(optimizer, self.step, params, grads, names,
                                                       t, self.total)[0]
