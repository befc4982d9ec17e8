"""Forward/backward layer pairs of the Spark decoder (docs/model.md, "The model").

`xxx_forward(...)` returns `(out, cache)`, `xxx_backward(dout, cache)` the gradients of
its inputs and weights; backward comments quote the forward line they differentiate.
Everything runs in the dtype and the array namespace of its inputs (`be = backend.of(x)`,
docs/gpu.md). Shapes: B batch, T time, C = dim, H query heads, KV kv heads, G = H // KV,
hd head dim, V vocab, N = B * T rows.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from sparktrain.model import backend

RMS_EPS = 1e-5
ROPE_BASE = 10000.0


class EmbeddingCache(NamedTuple):
    ids: np.ndarray        # (...) int
    vocab: int


class RmsNormCache(NamedTuple):
    xhat: np.ndarray       # (..., C) x * rstd
    rstd: np.ndarray       # (..., 1)
    weight: np.ndarray     # (C,)


class LinearCache(NamedTuple):
    x2: np.ndarray         # (N, in) input, leading axes flattened
    weight: np.ndarray     # (out, in)


class RopeCache(NamedTuple):
    cos: np.ndarray        # (T, X)
    sin: np.ndarray        # (T, X)


class AttentionCache(NamedTuple):
    qs: np.ndarray         # (B, KV, G*T, hd) scaled q, grouped by kv head
    k: np.ndarray          # (B, KV, T, hd)
    v: np.ndarray          # (B, KV, T, hd)
    e: np.ndarray          # (B, KV, G*T, T) unnormalised softmax
    r: np.ndarray          # (B, KV, G*T, 1) 1 / row sums
    y: np.ndarray          # (B, H, T, hd) output (numpy: laid out (B, T, H, hd))


class SwigluCache(NamedTuple):
    h: np.ndarray          # (N, C) input
    g: np.ndarray          # (N, F) gate pre-activation
    u: np.ndarray          # (N, F) up
    sig: np.ndarray        # (N, F) sigmoid(g)
    silu: np.ndarray       # (N, F) g * sig
    a: np.ndarray          # (N, F) silu * u
    w_gu: np.ndarray       # (2, F, C) gate and up weights stacked
    w_down: np.ndarray     # (C, F)


class CrossEntropyCache(NamedTuple):
    probs: np.ndarray      # (N, V) softmax, reused in place by the backward
    targets: np.ndarray    # (N,)
    weights: np.ndarray    # (N,)
    denom: float
    nll: np.ndarray        # (N,) each row's CE, unweighted: a token's own score


# ----------------------------------------------------------------- embedding

def embedding_forward(ids, weight):
    """Row lookup: ids (...) int -> (..., C)."""
    out = backend.of(weight).gather_rows(weight, ids)         # (..., C)
    return out, EmbeddingCache(ids, weight.shape[0])


def embedding_backward(dout, cache, sparse: bool = False):
    """Returns dweight (V, C): each row of dout added to the weight row it came from, as
    a one-hot matmul (docs/model.md "Architecture options": one BLAS call, no unordered scatter)."""
    ids, vocab = cache
    be = backend.of(dout)
    xp = be.xp
    flat_ids = xp.reshape(ids, (-1,))                        # (N,)
    dflat = xp.reshape(dout, (flat_ids.shape[0], -1))        # (N, C)
    if sparse:  # a table far larger than the batch (the bigram option's): only rows used
        return be.embedding_grad_rows(flat_ids, dflat, vocab)
    return be.embedding_grad(flat_ids, dflat, vocab)         # (V, C) = onehot (V, N) @ dflat


# ------------------------------------------------------------------- rmsnorm

def rmsnorm_forward(x, weight):
    """x (..., C) / sqrt(mean(x*x, -1) + eps) * weight (C,)."""
    be = backend.of(x)
    ms = be.rowdot(x, x)[..., None]                          # (..., 1) sum of squares
    ms *= 1.0 / x.shape[-1]
    ms += RMS_EPS
    rstd = 1.0 / be.xp.sqrt(ms)                              # (..., 1)
    xhat = x * rstd                                          # (..., C)
    out = xhat * weight                                      # (..., C)
    return out, RmsNormCache(xhat, rstd, weight)


def rmsnorm_backward(dout, cache):
    """Returns (dx, dweight)."""
    xhat, rstd, weight = cache
    be = backend.of(dout)
    xp = be.xp
    # out = xhat * weight
    C = xhat.shape[-1]
    dweight = be.coldot(xp.reshape(dout, (-1, C)), xp.reshape(xhat, (-1, C)))  # (C,)
    dxhat = dout * weight                                    # (..., C)
    # xhat = x * rstd, rstd = (mean(x*x) + eps)^-1/2, so
    # dx = rstd * (dxhat - xhat * mean(dxhat * xhat))
    proj = be.rowdot(dxhat, xhat)[..., None]                 # (..., 1)
    proj *= 1.0 / xhat.shape[-1]
    dxhat -= xhat * proj
    dxhat *= rstd
    return dxhat, dweight


# -------------------------------------------------------------------- linear

def linear_forward(x, weight):
    """x (..., in) @ weight.T, weight (out, in) -> (..., out), no bias, as one (N, in) gemm."""
    xp = backend.of(x).xp
    x2 = xp.reshape(x, (-1, x.shape[-1]))                    # (N, in)
    out = x2 @ weight.T                                      # (N, out)
    return xp.reshape(out, (*x.shape[:-1], weight.shape[0])), LinearCache(x2, weight)


def linear_backward(dout, cache):
    """Returns (dx, dweight)."""
    x2, weight = cache
    xp = backend.of(dout).xp
    d2 = xp.reshape(dout, (-1, dout.shape[-1]))              # (N, out)
    # out = x @ weight.T
    dx = d2 @ weight                                         # (N, in)
    dweight = d2.T @ x2                                      # (out, in)
    return xp.reshape(dx, (*dout.shape[:-1], weight.shape[1])), dweight


# ---------------------------------------------------------------------- rope

# A process uses one or two shapes (training, generation): a few kept, never more.
SHAPE_CACHE = 8


@functools.lru_cache(maxsize=SHAPE_CACHE)
def rope_tables(T, heads, hd, dtype):
    """Host cos and sin, (T, heads * hd/2): column h * hd/2 + i holds angle p * f_i of
    head h's pair i (rope_forward's planes), computed in float64, cast, cached."""
    freqs = ROPE_BASE ** (-2.0 * np.arange(hd // 2) / hd)  # (hd/2,) f_i = 10000^(-2i/hd)
    angle = np.arange(T)[:, None] * freqs[None, :]       # (T, hd/2) a = p * f_i
    cos = np.ascontiguousarray(np.tile(np.cos(angle), heads), dtype=dtype)  # (T, heads*hd/2)
    sin = np.ascontiguousarray(np.tile(np.sin(angle), heads), dtype=dtype)
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


def rope_forward(u, hd):
    """Rotate pairs (u_i, u_{i+hd/2}) of every head by angle p * f_i: u (2, B, T, heads *
    hd/2) holds each head's two halves as two planes; out1 = u1 cos - u2 sin,
    out2 = u2 cos + u1 sin."""
    be = backend.of(u)
    _, B, T, X = u.shape
    cos, sin = rope_tables(T, X * 2 // hd, hd, be.host_dtype(u))  # (T, X)
    cos, sin = be.constant(cos, u), be.constant(sin, u)
    out = be.rotate_pairs(u, cos, sin)                       # (2, B, T, X)
    return out, RopeCache(cos, sin)


def rope_backward(dout, cache):
    """Returns du (2, B, T, heads * hd/2)."""
    cos, sin = cache
    # out1 = u1 cos - u2 sin ; out2 = u2 cos + u1 sin
    #   => du1 = d1 cos + d2 sin ; du2 = d2 cos - d1 sin  (the rotation by -a)
    return backend.of(dout).rotate_pairs(dout, cos, sin, inverse=True)  # (2, B, T, X)


# ----------------------------------------------------------------- attention

@functools.lru_cache(maxsize=SHAPE_CACHE)
def causal_mask(T, dtype):
    """(T, T) additive mask: 0 where key <= query, -inf above the diagonal; cached."""
    m = np.triu(np.full((T, T), -np.inf, dtype=dtype), k=1)
    m.flags.writeable = False
    return m


# |score| <= EXP_SAFE: exp neither overflows nor goes subnormal in float32, so no max
EXP_SAFE = 60.0


def _scores_are_small(qs, k) -> bool:
    """|q.k| <= |q| |k| (Cauchy-Schwarz), a cheap bound on every score; False on a device,
    where reading it back would stall the queue."""
    maxes = backend.of(qs).max_rowdots(qs, k)
    if maxes is None:
        return False
    q2, k2 = maxes
    return q2 * k2 <= EXP_SAFE * EXP_SAFE


def attention_forward(q, k, v):
    """Causal grouped-query attention: q (B, H, T, hd), k and v (B, KV, T, hd) -> y (B, H,
    T, hd); query head j reads kv head j // G. Unnormalised softmax, divided afterwards
    (docs/model.md). Inputs may be strided views; numpy lays y out as (B, T, H, hd),
    so the heads side by side are a view of it."""
    be = backend.of(q)
    xp = be.xp
    B, H, T, hd = q.shape
    KV = k.shape[1]
    G = H // KV
    qs = be.scaled(q, 1.0 / math.sqrt(hd))                   # (B, H, T, hd)
    qs = xp.reshape(qs, (B, KV, G * T, hd))                  # (B, KV, G*T, hd) scaled q
    s = qs @ be.mT(k)                                        # (B, KV, G*T, T)
    mask = be.constant(causal_mask(T, be.host_dtype(s)), s)  # (T, T)
    s = be.add_as(s, (B, KV, G, T, T), mask)
    if not _scores_are_small(qs, k):
        # softmax is shift-invariant; the diagonal is never masked, so the max is finite
        s -= xp.max(s, axis=-1, keepdims=True)
    e = be.exp_(s)                                           # (B, KV, G*T, T) unnormalised
    ones = be.ones((T, 1), e)
    r = 1.0 / (e @ ones)                                     # (B, KV, G*T, 1) 1 / row sum
    y = e @ v                                                # (B, KV, G*T, hd)
    y = be.rows_to_heads(y, r, H)                            # (B, H, T, hd) att @ v, att = e * r
    return y, AttentionCache(qs, k, v, e, r, y)


def attention_backward(dy, cache, out=None):
    """Returns (dq, dk, dv); dk, dv summed over the G query heads of each kv head. dy may
    be a strided view. `out` (numpy): buffers (B, H + KV, T, hd) for dq beside dk and
    (B, T, KV, hd) for dv, which the results are then views of."""
    qs, k, v, e, r, y = cache
    be = backend.of(dy)
    xp = be.xp
    B, KV, GT, hd = qs.shape
    H = y.shape[1]
    dq_out = dk_out = dv_out = None
    if out is not None and be.writes_out:
        dqk, dvt = out
        dq_out = xp.reshape(dqk[:, :H, ...], (B, KV, GT, hd))    # views of the buffers
        dk_out, dv_out = dqk[:, H:, ...], be.permute(dvt, (0, 2, 1, 3))
    # y = (e @ v) * r,  r = 1 / (e @ 1):
    #   de = (dy * r) @ v^T - r * rowdot(dy, y)
    # both terms come out of one matmul by appending a column to each side.
    dyr = be.heads_to_rows(dy, r, KV)                        # (B, KV, G*T, hd) dy * r
    dot = be.rowdot(xp.reshape(dyr, y.shape), y)             # (B, H, T)
    lhs = be.append_column(dyr, -xp.reshape(dot, (B, KV, GT)))  # (B, KV, G*T, hd+1)
    rhs = be.append_column(v, 1)                             # (B, KV, T, hd+1)
    ds = lhs @ be.mT(rhs)                                    # (B, KV, G*T, T) de
    # e = exp(s - const): ds = de * e
    ds *= e
    dv = be.matmul(be.mT(e), dyr, out=dv_out)                # (B, KV, T, hd)
    # s = qs @ k^T, qs = q * scale  (the mask and the shift are constants)
    dq = be.matmul(ds, k, out=dq_out)                        # (B, KV, G*T, hd)
    dq *= 1.0 / math.sqrt(hd)
    dk = be.matmul(be.mT(ds), qs, out=dk_out)                # (B, KV, T, hd)
    return xp.reshape(dq, (B, H, GT // (H // KV), hd)), dk, dv


# ---------------------------------------------------------------- swiglu mlp

def swiglu_forward(h, w_gate, w_up, w_down):
    """(silu(h @ Wgate.T) * (h @ Wup.T)) @ Wdown.T; h (N, C), hidden F = 4C; gate and up
    from one matmul against the stacked (2, F, C) weight."""
    be = backend.of(h)
    w_gu = be.xp.stack([w_gate, w_up])                       # (2, F, C)
    gu = h @ be.mT(w_gu)                                     # (2, N, F)
    g, u = gu[0, ...], gu[1, ...]                            # (N, F) contiguous planes
    sig = be.sigmoid(g)                                      # (N, F) 1 / (1 + exp(-g))
    silu = g * sig                                           # (N, F)
    a = silu * u                                             # (N, F)
    out = a @ w_down.T                                       # (N, C)
    return out, SwigluCache(h, g, u, sig, silu, a, w_gu, w_down)


def swiglu_backward(dout, cache):
    """Returns (dh, dw_gate, dw_up, dw_down)."""
    h, g, u, sig, silu, a, w_gu, w_down = cache
    be = backend.of(dout)
    # out = a @ w_down.T
    dw_down = dout.T @ a                                     # (C, F)
    da = dout @ w_down                                       # (N, F)
    # a = silu * u:  du = da * silu
    # silu = g * sig(g):  dsilu/dg = sig * (1 + g * (1 - sig)) = sig + silu * (1 - sig)
    dgu = be.swiglu_gate_grads(da, silu, sig, u)             # (2, N, F) dg, du planes
    dg, du = dgu[0, ...], dgu[1, ...]                        # (N, F)
    # gu = h @ w_gu.T  (per plane)
    dw_gu = be.mT(dgu) @ h                                   # (2, F, C)
    dh = dg @ w_gu[0, ...]                                   # (N, C)
    dh += du @ w_gu[1, ...]
    return dh, dw_gu[0, ...], dw_gu[1, ...], dw_down


# ------------------------------------------------------------- cross-entropy

def cross_entropy_forward(logits, targets, weights, denom):
    """(sum(weights * CE(logits, targets)) / denom as a Python float, cache); logits (N, V),
    targets (N,) int, weights (N,); only the final weighted sum is in float64."""
    be = backend.of(logits)
    xp = be.xp
    shifted = logits - xp.max(logits, axis=-1, keepdims=True)  # (N, V)
    picked = be.pick(shifted, targets)                       # (N,) target logit - max
    probs = be.exp_(shifted)                                 # (N, V) unnormalised
    z = probs @ be.ones((probs.shape[1],), probs)            # (N,) row sums
    probs *= (1 / z)[:, None]
    nll = xp.log(z) - picked                                 # (N,)
    loss = be.weighted_sum(weights, nll) / denom
    return loss, CrossEntropyCache(probs, targets, weights, denom, nll)


def cross_entropy_backward(cache):
    """Returns dlogits (N, V) (dloss = 1), reusing the cached probs in place: once a forward."""
    probs, targets, weights, denom, _ = cache
    be = backend.of(probs)
    # loss = sum_n w_n * (logsumexp(logits_n) - logits_n[t_n]) / denom
    dlogits = be.sub_onehot_(probs, targets)                 # (N, V) probs - onehot(targets)
    dlogits *= be.astype(weights * (1.0 / denom), dlogits.dtype)[:, None]
    return dlogits


# ----------------------------------------------------------------- mean pool

def mean_pool_forward(x, mask):
    """Masked mean over time: x (B, T, C), mask (B, T) 1.0 on real tokens -> (B, C)."""
    be = backend.of(x)
    count = be.xp.sum(mask, axis=1, keepdims=True)           # (B, 1)
    w = mask / be.at_least(count, 1)                         # (B, T)
    out = be.pool(w, x)                                      # (B, C) sum_t w x
    return out, w


def mean_pool_backward(dout, cache):
    """Returns dx (B, T, C); the cache is mean_pool_forward's w."""
    # out = sum_t w[b, t] * x[b, t]
    return cache[:, :, None] * dout[:, None, :]              # (B, T, C)
