"""Forward/backward layer pairs of the opt-in architecture options (docs/model.md,
"Architecture options"): the ReLU^2 MLP, the logit soft-cap, the bigram option's hashed
ids, the value residual's mix and the U-net's weighted skip. Each is off unless
params.yaml's `arch` names it; model/build.py chains them in. The conventions are those
of model/layers.py (returns, comments, shapes).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sparktrain.model import backend

BIGRAM_MULT = 1_000_003  # a prime: (prev, cur) pairs spread over the buckets


class Relu2Cache(NamedTuple):
    h: np.ndarray          # (N, C) input
    r: np.ndarray          # (N, F) relu(h @ Wup.T)
    a: np.ndarray          # (N, F) r * r
    w_up: np.ndarray       # (F, C)
    w_down: np.ndarray     # (C, F)


class SoftCapCache(NamedTuple):
    t: np.ndarray          # (..., V) tanh(x / cap)
    cap: float


class ValueMixCache(NamedTuple):
    diff: np.ndarray       # (N, D) v1 - v
    lam: np.ndarray        # (1,)


class SkipCache(NamedTuple):
    skip: np.ndarray       # (..., C) the earlier block's output
    w: np.ndarray          # (1,)


# ------------------------------------------------------------ bigram ids

def bigram_ids(ids: np.ndarray, vocab: int, buckets: int) -> np.ndarray:
    """Host ids (B, T) -> the hashed bucket of each (previous, current) pair (B, T); a row's
    first token pairs with `vocab`, an id no token has (the `bigram` option)."""
    ids = np.asarray(ids, dtype=np.int64)
    prev = np.concatenate([np.full((ids.shape[0], 1), vocab, np.int64), ids[:, :-1]], axis=1)
    return (prev * BIGRAM_MULT + ids) % buckets                 # (B, T)


# ----------------------------------------------------------------- relu^2 mlp

def relu2_forward(h, w_up, w_down):
    """relu(h @ Wup.T)^2 @ Wdown.T (the `mlp: relu2` option); h (N, C), hidden F = 4C."""
    xp = backend.of(h).xp
    u = h @ w_up.T                                           # (N, F)
    r = xp.maximum(u, 0)                                     # (N, F)
    a = r * r                                                # (N, F)
    out = a @ w_down.T                                       # (N, C)
    return out, Relu2Cache(h, r, a, w_up, w_down)


def relu2_backward(dout, cache):
    """Returns (dh, dw_up, dw_down)."""
    h, r, a, w_up, w_down = cache
    # out = a @ w_down.T
    dw_down = dout.T @ a                                     # (C, F)
    da = dout @ w_down                                       # (N, F)
    # a = relu(u)^2:  du = da * 2 relu(u)
    du = da * r                                              # (N, F)
    du *= 2.0
    # u = h @ w_up.T
    dw_up = du.T @ h                                         # (F, C)
    dh = du @ w_up                                           # (N, C)
    return dh, dw_up, dw_down


# ------------------------------------------------------------ logit soft-cap

def softcap_forward(x, cap: float):
    """cap * tanh(x / cap) (the `logit_cap` option): logits stay within (-cap, cap)."""
    t = backend.of(x).xp.tanh(x * (1.0 / cap))               # (..., V)
    return t * cap, SoftCapCache(t, cap)


def softcap_backward(dout, cache):
    """Returns dx."""
    t, cap = cache
    # out = cap * tanh(x / cap):  dx = dout * (1 - t^2)
    return dout - dout * (t * t)                             # (..., V)


# ------------------------------------------------------------ value residual

def value_mix_forward(v, v1, lam):
    """(1 - lam) v + lam v1 (the `value_residual` option): a layer's values v (N, D) moved
    towards the first layer's v1 (N, D) by its learned scalar lam (1,)."""
    diff = v1 - v                                            # (N, D)
    return v + lam * diff, ValueMixCache(diff, lam)


def value_mix_backward(dout, cache):
    """Returns (dv, dv1, dlam)."""
    diff, lam = cache
    xp = backend.of(dout).xp
    # out = (1 - lam) v + lam v1
    dv1 = dout * lam                                         # (N, D)
    dv = dout - dv1                                          # (N, D)
    # out = v + lam (v1 - v):  dlam = sum(dout * (v1 - v))
    dlam = xp.reshape(xp.sum(dout * diff), (1,))             # (1,)
    return dv, dv1, dlam


# ------------------------------------------------------------ u-net skip

def skip_forward(x, skip, w):
    """x + w skip (the `unet` option): a block's input x (B, T, C) plus the output of its
    mirror block, skip (B, T, C), scaled by a learned scalar w (1,). A new array: x and
    skip may be the same one."""
    return x + w * skip, SkipCache(skip, w)


def skip_backward(dout, cache):
    """Returns (dx, dskip, dw); dx is dout itself."""
    skip, w = cache
    xp = backend.of(dout).xp
    # out = x + w skip
    dskip = dout * w                                         # (B, T, C)
    dw = xp.reshape(xp.sum(dout * skip), (1,))               # (1,)
    return dout, dskip, dw
