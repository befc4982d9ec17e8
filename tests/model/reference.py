"""Naive references of the model's fast paths, for tests only: loops and the
spec's formulas, written for clarity and never for speed."""
from __future__ import annotations

import numpy as np

from sparktrain.model.layers import RMS_EPS, ROPE_BASE


def to_planes(u):
    """(B, T, heads, hd) -> (2, B, T, heads * hd/2): first halves, second halves
    (the layout rope_forward works in)."""
    B, T, heads, hd = u.shape
    return np.ascontiguousarray(
        u.reshape(B, T, heads, 2, hd // 2).transpose(3, 0, 1, 2, 4)).reshape(2, B, T, -1)


def from_planes(p, hd):
    """Inverse of to_planes: (2, B, T, heads * hd/2) -> (B, T, heads, hd)."""
    _, B, T, X = p.shape
    return np.ascontiguousarray(
        p.reshape(2, B, T, X * 2 // hd, hd // 2).transpose(1, 2, 3, 0, 4)).reshape(B, T, -1, hd)


def rope_naive(u):
    """docs/model.md's rope, one position and one pair at a time; u (B, T, heads, hd)."""
    T, hd = u.shape[1], u.shape[-1]
    out = np.empty_like(u)
    for p in range(T):
        for i in range(hd // 2):
            a = p * ROPE_BASE ** (-2 * i / hd)
            x, y = u[:, p, :, i], u[:, p, :, i + hd // 2]
            out[:, p, :, i] = x * np.cos(a) - y * np.sin(a)
            out[:, p, :, i + hd // 2] = x * np.sin(a) + y * np.cos(a)
    return out


def attention_naive(q, k, v):
    """Causal GQA attention with per-head loops and an explicit masked softmax."""
    B, H, T, hd = q.shape
    G = H // k.shape[1]
    y = np.zeros_like(q)
    for b in range(B):
        for j in range(H):
            kj, vj = k[b, j // G], v[b, j // G]              # (T, hd)
            for t in range(T):
                scores = np.array([q[b, j, t] @ kj[s] / np.sqrt(hd) for s in range(t + 1)])
                w = np.exp(scores - scores.max())
                w /= w.sum()
                y[b, j, t] = sum(w[s] * vj[s] for s in range(t + 1))
    return y


def embedding_backward_naive(dout, ids, vocab):
    """Scatter-add of every row of dout into the weight row it came from."""
    dw = np.zeros((vocab, dout.shape[-1]), dtype=dout.dtype)
    np.add.at(dw, ids.reshape(-1), dout.reshape(ids.size, -1))
    return dw


def swiglu_naive(h, w_gate, w_up, w_down):
    """(silu(h Wg^T) * (h Wu^T)) Wd^T, with separate matmuls."""
    g = h @ w_gate.T
    return ((g / (1 + np.exp(-g))) * (h @ w_up.T)) @ w_down.T


def _rmsnorm(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + RMS_EPS) * w


def forward_logits_naive(params, cfg, inputs):
    """docs/model.md "The model" written out: separate q, k, v projections per layer,
    rope per head, attention_naive, swiglu_naive; inputs (B, T) -> logits (B, T, V)."""
    B, T = inputs.shape
    H, KV, hd = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    x = params["spark.embed.weight"][inputs]                   # (B, T, C)
    for L in range(cfg.n_layer):
        w = {k: params[f"spark.layers.{L}.{k}.weight"] for k in
             ("attn_norm", "q", "k", "v", "o", "mlp_norm", "mlp_gate", "mlp_up", "mlp_down")}
        h = _rmsnorm(x, w["attn_norm"])
        q = rope_naive((h @ w["q"].T).reshape(B, T, H, hd)).transpose(0, 2, 1, 3)   # (B, H, T, hd)
        k = rope_naive((h @ w["k"].T).reshape(B, T, KV, hd)).transpose(0, 2, 1, 3)  # (B, KV, T, hd)
        v = (h @ w["v"].T).reshape(B, T, KV, hd).transpose(0, 2, 1, 3)              # (B, KV, T, hd)
        y = attention_naive(q, k, v).transpose(0, 2, 1, 3).reshape(B, T, -1)       # (B, T, C)
        x = x + y @ w["o"].T
        x = x + swiglu_naive(_rmsnorm(x, w["mlp_norm"]), w["mlp_gate"], w["mlp_up"],
                             w["mlp_down"])
    return _rmsnorm(x, params["spark.final_norm.weight"]) @ params["spark.lm_head.weight"].T
