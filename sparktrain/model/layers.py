"""Forward/backward layer pairs of the Spark decoder (docs/training.md, "The model").

Each `xxx_forward(...)` returns `(out, cache)`; the matching
`xxx_backward(dout, cache)` returns the gradients of its inputs and weights.
Backward comments quote the forward line they differentiate. Everything runs
in the dtype of its inputs: float32 in training, float64 in the gradient tests.
Shapes: B batch, T time, C = dim, H query heads, KV kv heads, G = H // KV,
hd head dim, V vocab, N = B * T rows.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

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
    y: np.ndarray          # (B, KV, G*T, hd) output


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


# ----------------------------------------------------------------- embedding

def embedding_forward(ids, weight):
    """Row lookup: ids (...) int -> (..., C)."""
    out = weight[ids]                                        # (..., C)
    return out, EmbeddingCache(ids, weight.shape[0])


def embedding_backward(dout, cache):
    """Returns dweight (V, C).

    Differentiates `out = weight[ids]`: every row of dout is added to the
    weight row it came from. A one-hot matmul does that scatter-add in one BLAS
    call in the working dtype (np.add.at is slow, np.bincount works in float64).
    """
    ids, vocab = cache
    flat_ids = ids.reshape(-1)                               # (N,)
    dflat = dout.reshape(flat_ids.size, -1)                  # (N, C)
    onehot = np.zeros((vocab, flat_ids.size), dtype=dout.dtype)  # (V, N)
    onehot[flat_ids, np.arange(flat_ids.size)] = 1
    return onehot @ dflat                                    # (V, C)


# ------------------------------------------------------------------- rmsnorm

def rmsnorm_forward(x, weight):
    """x (..., C) / sqrt(mean(x*x, -1) + eps) * weight (C,)."""
    ms = np.einsum("...c,...c->...", x, x)[..., None]        # (..., 1) sum of squares
    ms *= 1.0 / x.shape[-1]
    ms += RMS_EPS
    rstd = 1.0 / np.sqrt(ms)                                 # (..., 1)
    xhat = x * rstd                                          # (..., C)
    out = xhat * weight                                      # (..., C)
    return out, RmsNormCache(xhat, rstd, weight)


def rmsnorm_backward(dout, cache):
    """Returns (dx, dweight)."""
    xhat, rstd, weight = cache
    # out = xhat * weight
    C = xhat.shape[-1]
    dweight = np.einsum("nc,nc->c", dout.reshape(-1, C), xhat.reshape(-1, C))  # (C,)
    dxhat = dout * weight                                    # (..., C)
    # xhat = x * rstd, rstd = (mean(x*x) + eps)^-1/2, so
    # dx = rstd * (dxhat - xhat * mean(dxhat * xhat))
    proj = np.einsum("...c,...c->...", dxhat, xhat)[..., None]  # (..., 1)
    proj *= 1.0 / xhat.shape[-1]
    dxhat -= xhat * proj
    dxhat *= rstd
    return dxhat, dweight


# -------------------------------------------------------------------- linear

def linear_forward(x, weight):
    """x (..., in) @ weight.T, weight (out, in) -> (..., out). No bias.

    Leading axes are flattened first: one (N, in) x (in, out) gemm, not one per batch row.
    """
    x2 = x.reshape(-1, x.shape[-1])                          # (N, in)
    out = x2 @ weight.T                                      # (N, out)
    return out.reshape(*x.shape[:-1], weight.shape[0]), LinearCache(x2, weight)


def linear_backward(dout, cache):
    """Returns (dx, dweight)."""
    x2, weight = cache
    d2 = dout.reshape(-1, dout.shape[-1])                    # (N, out)
    # out = x @ weight.T
    dx = d2 @ weight                                         # (N, in)
    dweight = d2.T @ x2                                      # (out, in)
    return dx.reshape(*dout.shape[:-1], weight.shape[1]), dweight


# ---------------------------------------------------------------------- rope

_ROPE_CACHE: dict[tuple[int, int, int, str], tuple[np.ndarray, np.ndarray]] = {}


def rope_tables(T, heads, hd, dtype):
    """cos and sin, (T, heads * hd/2), for positions 0..T-1; cached.

    Column h * hd/2 + i holds angle p * f_i of pair i of head h, matching the
    planes layout of rope_forward. Angles are computed in float64 once, then cast.
    """
    key = (T, heads, hd, np.dtype(dtype).str)
    if key not in _ROPE_CACHE:
        freqs = ROPE_BASE ** (-2.0 * np.arange(hd // 2) / hd)  # (hd/2,) f_i = 10000^(-2i/hd)
        angle = np.arange(T)[:, None] * freqs[None, :]       # (T, hd/2) a = p * f_i
        cos = np.ascontiguousarray(np.tile(np.cos(angle), heads), dtype=dtype)  # (T, heads*hd/2)
        sin = np.ascontiguousarray(np.tile(np.sin(angle), heads), dtype=dtype)
        cos.flags.writeable = sin.flags.writeable = False
        _ROPE_CACHE[key] = (cos, sin)
    return _ROPE_CACHE[key]


def rope_forward(u, hd):
    """Rotate pairs (u_i, u_{i+hd/2}) of every head by angle p * f_i.

    u (2, B, T, heads * hd/2) holds the two halves of every head as two planes
    (plane p, column h * hd/2 + i = element p * hd/2 + i of head h), so each
    product runs over whole contiguous rows:
      out1 = u1 cos a - u2 sin a,   out2 = u2 cos a + u1 sin a.
    """
    _, B, T, X = u.shape
    cos, sin = rope_tables(T, X * 2 // hd, hd, u.dtype)     # (T, X)
    u1, u2 = u[0], u[1]                                      # (B, T, X)
    out = np.empty_like(u)                                   # (2, B, T, X)
    tmp = u2 * sin                                           # (B, T, X)
    np.multiply(u1, cos, out=out[0])
    out[0] -= tmp
    np.multiply(u1, sin, out=tmp)
    np.multiply(u2, cos, out=out[1])
    out[1] += tmp
    return out, RopeCache(cos, sin)


def rope_backward(dout, cache):
    """Returns du (2, B, T, heads * hd/2)."""
    cos, sin = cache
    d1, d2 = dout[0], dout[1]                                # (B, T, X)
    # out1 = u1 cos - u2 sin ; out2 = u2 cos + u1 sin
    #   => du1 = d1 cos + d2 sin ; du2 = d2 cos - d1 sin
    du = np.empty_like(dout)                                 # (2, B, T, X)
    tmp = d2 * sin                                           # (B, T, X)
    np.multiply(d1, cos, out=du[0])
    du[0] += tmp
    np.multiply(d1, sin, out=tmp)
    np.multiply(d2, cos, out=du[1])
    du[1] -= tmp
    return du


# ----------------------------------------------------------------- attention

_MASK_CACHE: dict[tuple[int, str], np.ndarray] = {}


def causal_mask(T, dtype):
    """(T, T) additive mask: 0 where key <= query, -inf above the diagonal; cached."""
    key = (T, np.dtype(dtype).str)
    if key not in _MASK_CACHE:
        m = np.triu(np.full((T, T), -np.inf, dtype=dtype), k=1)
        m.flags.writeable = False
        _MASK_CACHE[key] = m
    return _MASK_CACHE[key]


# exp() of a score in [-EXP_SAFE, EXP_SAFE] neither overflows (even summed over
# 4096 keys) nor underflows to a subnormal in float32, so no max is needed.
EXP_SAFE = 60.0


def _scores_are_small(qs, k) -> bool:
    """|q.k| <= |q| |k| (Cauchy-Schwarz): a cheap bound on every score."""
    q2 = np.einsum("...d,...d->...", qs, qs).max()
    k2 = np.einsum("...d,...d->...", k, k).max()
    return float(q2) * float(k2) <= EXP_SAFE * EXP_SAFE


def attention_forward(q, k, v):
    """Causal grouped-query attention.

    q (B, H, T, hd), k and v (B, KV, T, hd) -> y (B, H, T, hd). Query head j
    reads kv head j // G: q is viewed as (B, KV, G*T, hd) so the G heads of a
    group share one batched matmul with their kv head (no copies of k, v).
    The softmax is left unnormalised (e = exp(s)) and y is divided by the row
    sums afterwards, on the 16x smaller (.., hd) side; the row max is only
    subtracted when the scores could be large enough for exp to overflow.
    """
    B, H, T, hd = q.shape
    KV = k.shape[1]
    G = H // KV
    qs = np.multiply(q, 1.0 / math.sqrt(hd), out=np.empty(q.shape, q.dtype))  # (B, H, T, hd)
    qs = qs.reshape(B, KV, G * T, hd)                        # (B, KV, G*T, hd) scaled q
    s = qs @ k.swapaxes(-1, -2)                              # (B, KV, G*T, T)
    s.reshape(B, KV, G, T, T)[...] += causal_mask(T, s.dtype)
    if not _scores_are_small(qs, k):
        # softmax is shift-invariant; the diagonal is never masked, so the max is finite
        s -= s.max(axis=-1, keepdims=True)
    e = np.exp(s, out=s)                                     # (B, KV, G*T, T) unnormalised
    ones = np.ones((T, 1), dtype=e.dtype)
    r = 1.0 / (e @ ones)                                     # (B, KV, G*T, 1) 1 / row sum
    y = e @ v                                                # (B, KV, G*T, hd)
    y *= r                                                   # att @ v, att = e * r
    return y.reshape(B, H, T, hd), AttentionCache(qs, k, v, e, r, y)


def attention_backward(dy, cache):
    """Returns (dq, dk, dv); dk, dv summed over the G query heads of each kv head."""
    qs, k, v, e, r, y = cache
    B, KV, GT, hd = qs.shape
    dyg = dy.reshape(B, KV, GT, hd)                          # (B, KV, G*T, hd)
    # y = (e @ v) * r,  r = 1 / (e @ 1):
    #   de = (dy * r) @ v^T - r * rowdot(dy, y)
    # both terms come out of one matmul by appending a column to each side.
    dyr = dyg * r                                            # (B, KV, G*T, hd)
    lhs = np.empty((B, KV, GT, hd + 1), dtype=dy.dtype)      # (B, KV, G*T, hd+1)
    lhs[..., :hd] = dyr
    np.einsum("...d,...d->...", dyr, y, out=lhs[..., hd])
    np.negative(lhs[..., hd], out=lhs[..., hd])
    rhs = np.ones((B, KV, v.shape[2], hd + 1), dtype=dy.dtype)  # (B, KV, T, hd+1)
    rhs[..., :hd] = v
    ds = lhs @ rhs.swapaxes(-1, -2)                          # (B, KV, G*T, T) de
    # e = exp(s - const): ds = de * e
    ds *= e
    dv = e.swapaxes(-1, -2) @ dyr                            # (B, KV, T, hd)
    # s = qs @ k^T, qs = q * scale  (the mask and the shift are constants)
    dq = ds @ k                                              # (B, KV, G*T, hd)
    dq *= 1.0 / math.sqrt(hd)
    dk = ds.swapaxes(-1, -2) @ qs                            # (B, KV, T, hd)
    return dq.reshape(dy.shape), dk, dv


# ---------------------------------------------------------------- swiglu mlp

def swiglu_forward(h, w_gate, w_up, w_down):
    """(silu(h @ Wgate.T) * (h @ Wup.T)) @ Wdown.T; h (N, C), hidden F = 4C.

    Gate and up come out of one batched matmul against the stacked (2, F, C)
    weight, as two contiguous (N, F) planes: element-wise work on contiguous
    rows runs about twice as fast as on the column halves of an (N, 2F) array.
    """
    w_gu = np.stack([w_gate, w_up])                          # (2, F, C)
    gu = np.matmul(h, w_gu.transpose(0, 2, 1))               # (2, N, F)
    g, u = gu[0], gu[1]                                      # (N, F) contiguous planes
    sig = np.negative(g)                                     # (N, F)
    np.exp(sig, out=sig)
    sig += 1
    np.reciprocal(sig, out=sig)                              # sigmoid(g)
    silu = g * sig                                           # (N, F)
    a = silu * u                                             # (N, F)
    out = a @ w_down.T                                       # (N, C)
    return out, SwigluCache(h, g, u, sig, silu, a, w_gu, w_down)


def swiglu_backward(dout, cache):
    """Returns (dh, dw_gate, dw_up, dw_down)."""
    h, g, u, sig, silu, a, w_gu, w_down = cache
    # out = a @ w_down.T
    dw_down = dout.T @ a                                     # (C, F)
    da = dout @ w_down                                       # (N, F)
    dgu = np.empty((2,) + da.shape, dtype=da.dtype)          # (2, N, F)
    dg, du = dgu[0], dgu[1]                                  # (N, F) contiguous planes
    # a = silu * u
    np.multiply(da, silu, out=du)
    # silu = g * sig(g):  dsilu/dg = sig * (1 + g * (1 - sig)) = sig + silu * (1 - sig)
    np.subtract(1, sig, out=dg)
    dg *= silu
    dg += sig
    dg *= u
    dg *= da
    # gu = h @ w_gu.T  (per plane)
    dw_gu = np.matmul(dgu.transpose(0, 2, 1), h)             # (2, F, C)
    dh = dg @ w_gu[0]                                        # (N, C)
    dh += du @ w_gu[1]
    return dh, dw_gu[0], dw_gu[1], dw_down


# ------------------------------------------------------------- cross-entropy

def cross_entropy_forward(logits, targets, weights, denom):
    """sum(weights * CE(logits, targets)) / denom.

    logits (N, V), targets (N,) int, weights (N,) (1.0 counted, 0.0 ignored).
    Returns (loss as a Python float, cache). The per-row log-sum-exp stays in
    the working dtype; only the final weighted sum is accumulated in float64.
    """
    rows = np.arange(targets.shape[0])
    shifted = logits - logits.max(axis=-1, keepdims=True)    # (N, V)
    picked = shifted[rows, targets]                          # (N,) target logit - max
    probs = np.exp(shifted, out=shifted)                     # (N, V) unnormalised
    z = probs @ np.ones(probs.shape[1], dtype=probs.dtype)   # (N,) row sums
    probs *= (1 / z)[:, None]
    nll = np.log(z) - picked                                 # (N,)
    loss = float(np.dot(weights.astype(np.float64), nll.astype(np.float64))) / denom
    return loss, CrossEntropyCache(probs, targets, weights, denom)


def cross_entropy_backward(cache):
    """Returns dlogits (N, V) of the loss (the loss is the graph's output: dloss = 1).

    Reuses the cached probs in place: call once per forward.
    """
    probs, targets, weights, denom = cache
    # loss = sum_n w_n * (logsumexp(logits_n) - logits_n[t_n]) / denom
    dlogits = probs                                          # (N, V)
    dlogits[np.arange(targets.shape[0]), targets] -= 1
    dlogits *= (weights * (1.0 / denom)).astype(dlogits.dtype)[:, None]
    return dlogits


# ----------------------------------------------------------------- mean pool

def mean_pool_forward(x, mask):
    """Masked mean over time: x (B, T, C), mask (B, T) 1.0 on real tokens -> (B, C)."""
    count = mask.sum(axis=1, keepdims=True)                  # (B, 1)
    w = mask / np.maximum(count, 1)                          # (B, T)
    out = np.einsum("bt,btc->bc", w, x)                      # (B, C)
    return out, w


def mean_pool_backward(dout, cache):
    """Returns dx (B, T, C)."""
    w = cache
    # out = sum_t w[b, t] * x[b, t]
    return w[:, :, None] * dout[:, None, :]                  # (B, T, C)
