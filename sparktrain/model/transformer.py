"""The Spark decoder: init, forward, loss and hand-written backward in numpy.

Math and tensor names: docs/training.md "The model", "Mean-pool fallback", "Tensors".
The params dict is keyed by the safetensors names (config.param_shapes order);
the grads dict uses the same keys, shapes and dtype. All work happens in the
dtype of the params (float32 in training, float64 in the gradient tests).

Init (deterministic from seed and salt, salt = the program's sha256):
  rng = PCG64(SeedSequence([seed, w0, w1, w2, w3])), w = the first four
  little-endian uint32 words of sha256(salt). Tensors are drawn in
  param_shapes order, in float64, then cast to the working dtype:
  - norm weights: 1 (nothing drawn);
  - every matrix: normal(0, 0.02) as in GPT-2 / nanoGPT, except the two
    projections that write into the residual stream (`o`, `mlp_down`), whose
    std is 0.02 / sqrt(2 * n_layer) so the residual's variance does not grow
    with depth (nanoGPT's `c_proj` scaling).
"""
from __future__ import annotations

import hashlib

import numpy as np

from sparktrain.errors import SparkError
from sparktrain.model import layers
from sparktrain.model.batch import PoolBatch, TokenBatch
from sparktrain.model.config import ModelConfig, param_shapes

INIT_STD = 0.02
RESIDUAL_OUT = ("o.weight", "mlp_down.weight")


# ---------------------------------------------------------------------- init

def init_rng(seed: int, salt: bytes = b"") -> np.random.Generator:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise SparkError(f"seed must be a non-negative integer, got {seed!r}")
    words = np.frombuffer(hashlib.sha256(salt).digest()[:16], dtype="<u4")
    return np.random.Generator(np.random.PCG64(
        np.random.SeedSequence([int(seed), *(int(w) for w in words)])))


def init_params(cfg: ModelConfig, seed: int, salt: bytes = b"",
                dtype=np.float32) -> dict[str, np.ndarray]:
    """Fresh weights, keys and order of param_shapes(cfg); see the module docstring."""
    rng = init_rng(seed, salt)
    resid_std = INIT_STD / np.sqrt(2 * cfg.n_layer)
    params = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            params[name] = np.ones(shape, dtype=dtype)
            continue
        std = resid_std if name.endswith(RESIDUAL_OUT) else INIT_STD
        params[name] = (rng.standard_normal(shape) * std).astype(dtype)
    return params


# ------------------------------------------------------------------- forward

def _layer_names(L: int) -> dict[str, str]:
    p = f"spark.layers.{L}."
    return {k: p + k + ".weight" for k in
            ("attn_norm", "q", "k", "v", "o", "mlp_norm", "mlp_gate", "mlp_up", "mlp_down")}


def _qk_planes(w_q, w_k, half):
    """Stacked q and k weights, rows regrouped as rope's two planes: (2, X, C).

    Plane p, row h * half + i is row h * hd + p * half + i of [Wq; Wk], so one
    batched matmul gives the first and the second halves of every head as two
    contiguous (N, X) planes, X = (n_head + n_kv_head) * hd/2.
    """
    w_qk = np.concatenate([w_q, w_k])                              # ((H + KV) hd, C)
    heads, C = w_qk.shape[0] // (2 * half), w_qk.shape[1]
    return np.ascontiguousarray(
        w_qk.reshape(heads, 2, half, C).transpose(1, 0, 2, 3)).reshape(2, heads * half, C)


def _block_forward(x, params, cfg, L):
    """One pre-norm block: x (B, T, C) -> (B, T, C), cache.

    q and k come out of one batched matmul as rope's two planes (_qk_planes);
    after rope they are regrouped per head, (B, heads, T, hd), for attention.
    """
    w = {k: params[n] for k, n in _layer_names(L).items()}
    B, T, C = x.shape
    H, KV, hd = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    half, N = hd // 2, B * T
    w_planes = _qk_planes(w["q"], w["k"], half)                   # (2, X, C)
    h, c_n1 = layers.rmsnorm_forward(x, w["attn_norm"])            # (B, T, C)
    h2 = h.reshape(N, C)                                           # (N, C)
    qk = np.matmul(h2, w_planes.transpose(0, 2, 1))                # (2, N, X) = h @ [Wq; Wk].T
    qk, c_rope = layers.rope_forward(qk.reshape(2, B, T, -1), hd)  # (2, B, T, X)
    heads = np.ascontiguousarray(qk.reshape(2, B, T, H + KV, half).transpose(1, 3, 2, 0, 4))
    heads = heads.reshape(B, H + KV, T, hd)                        # (B, H + KV, T, hd)
    v = h2 @ w["v"].T                                              # (N, KV hd)
    v = np.ascontiguousarray(v.reshape(B, T, KV, hd).transpose(0, 2, 1, 3))  # (B, KV, T, hd)
    y, c_att = layers.attention_forward(heads[:, :H], heads[:, H:], v)  # (B, H, T, hd)
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C)                   # (B, T, C) heads concatenated
    att_out, c_o = layers.linear_forward(y, w["o"])                # (B, T, C)
    x = x + att_out                                                # (B, T, C)
    h2n, c_n2 = layers.rmsnorm_forward(x, w["mlp_norm"])           # (B, T, C)
    mlp_out, c_mlp = layers.swiglu_forward(
        h2n.reshape(N, C), w["mlp_gate"], w["mlp_up"], w["mlp_down"])  # (N, C)
    x = x + mlp_out.reshape(B, T, C)                               # (B, T, C)
    return x, (c_n1, h2, w_planes, w["v"], c_rope, c_att, c_o, c_n2, c_mlp)


def _block_backward(dx, cache, cfg, L, grads):
    """Reverse of _block_forward; writes this layer's grads, returns dx (B, T, C)."""
    c_n1, h2, w_planes, w_v, c_rope, c_att, c_o, c_n2, c_mlp = cache
    names = _layer_names(L)
    B, T, C = dx.shape
    H, KV, hd = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    half, N = hd // 2, B * T
    # x = x + mlp_out ; mlp_out = swiglu(h2n)
    dh2n, grads[names["mlp_gate"]], grads[names["mlp_up"]], grads[names["mlp_down"]] = \
        layers.swiglu_backward(dx.reshape(N, C), c_mlp)            # (N, C)
    # h2n = rmsnorm(x, mlp_norm)
    dxn, grads[names["mlp_norm"]] = layers.rmsnorm_backward(dh2n.reshape(B, T, C), c_n2)
    dx = dx + dxn                                                  # (B, T, C)
    # x = x + att_out ; att_out = y @ Wo.T
    dy, grads[names["o"]] = layers.linear_backward(dx, c_o)        # (B, T, C)
    dy = dy.reshape(B, T, H, hd).transpose(0, 2, 1, 3)             # (B, H, T, hd)
    # y = attention(heads[:, :H], heads[:, H:], v)
    dq, dk, dv = layers.attention_backward(dy, c_att)              # (B, H|KV, T, hd)
    # v = (h2 @ Wv.T) regrouped per head
    dv2 = dv.transpose(0, 2, 1, 3).reshape(N, KV * hd)             # (N, KV hd)
    grads[names["v"]] = dv2.T @ h2                                 # (KV hd, C)
    dh = dv2 @ w_v                                                 # (N, C)
    # heads = planes regrouped per head
    dheads = np.empty((B, H + KV, T, 2, half), dtype=dx.dtype)     # (B, H + KV, T, 2, half)
    dheads[:, :H] = dq.reshape(B, H, T, 2, half)
    dheads[:, H:] = dk.reshape(B, KV, T, 2, half)
    dqk = np.ascontiguousarray(dheads.transpose(3, 0, 2, 1, 4)).reshape(2, B, T, -1)
    # qk = rope(planes)
    dqk = layers.rope_backward(dqk, c_rope).reshape(2, N, -1)      # (2, N, X)
    # planes = h2 @ w_planes.T (per plane)
    dw_planes = np.matmul(dqk.transpose(0, 2, 1), h2)              # (2, X, C)
    dh += dqk[0] @ w_planes[0]
    dh += dqk[1] @ w_planes[1]
    dw_qk = dw_planes.reshape(2, H + KV, half, C).transpose(1, 0, 2, 3).reshape(-1, C)
    grads[names["q"]], grads[names["k"]] = dw_qk[:H * hd], dw_qk[H * hd:]
    # h = rmsnorm(x, attn_norm)
    dxn, grads[names["attn_norm"]] = layers.rmsnorm_backward(dh.reshape(B, T, C), c_n1)
    return dx + dxn


def _trunk_forward(params, cfg, inputs):
    """embed -> blocks -> final norm: inputs (B, T) -> hidden (B, T, C), caches."""
    x, c_emb = layers.embedding_forward(inputs, params["spark.embed.weight"])  # (B, T, C)
    c_blocks = []
    for L in range(cfg.n_layer):
        x, c = _block_forward(x, params, cfg, L)                   # (B, T, C)
        c_blocks.append(c)
    hf, c_fn = layers.rmsnorm_forward(x, params["spark.final_norm.weight"])  # (B, T, C)
    return hf, (c_emb, c_blocks, c_fn)


def _trunk_backward(dhf, cache, cfg, grads):
    c_emb, c_blocks, c_fn = cache
    dx, grads["spark.final_norm.weight"] = layers.rmsnorm_backward(dhf, c_fn)  # (B, T, C)
    for L in reversed(range(cfg.n_layer)):
        dx = _block_backward(dx, c_blocks[L], cfg, L, grads)
    grads["spark.embed.weight"] = layers.embedding_backward(dx, c_emb)


def forward_logits(params, cfg: ModelConfig, inputs) -> np.ndarray:
    """Attention model: inputs (B, T) int -> logits (B, T, 256)."""
    inputs = np.asarray(inputs)
    hf, _ = _trunk_forward(params, cfg, inputs)                    # (B, T, C)
    logits, _ = layers.linear_forward(hf, params["spark.lm_head.weight"])
    return logits                                                  # (B, T, V)


def pool_logits(params, cfg: ModelConfig, context, context_mask) -> np.ndarray:
    """Mean-pool fallback: context (B, T) int, context_mask (B, T) -> logits (B, 256)."""
    logits, _ = _pool_forward(params, np.asarray(context), context_mask)
    return logits


def _pool_forward(params, context, context_mask):
    dtype = params["spark.embed.weight"].dtype
    mask = np.asarray(context_mask, dtype=dtype)                   # (B, T)
    e, c_emb = layers.embedding_forward(context, params["spark.embed.weight"])  # (B, T, C)
    h, c_pool = layers.mean_pool_forward(e, mask)                  # (B, C)
    logits, c_head = layers.linear_forward(h, params["spark.lm_head.weight"])   # (B, V)
    return logits, (c_emb, c_pool, c_head)


# --------------------------------------------------------------- loss, grads

def _token_loss(params, cfg, batch: TokenBatch, denom_of):
    """Forward to the loss. Only counted rows go through lm_head: the others
    carry weight 0, so skipping them changes neither loss nor gradients."""
    dtype = params["spark.embed.weight"].dtype
    inputs = np.asarray(batch.inputs)
    B, T = inputs.shape
    hf, c_trunk = _trunk_forward(params, cfg, inputs)              # (B, T, C)
    mask = np.asarray(batch.mask).reshape(-1)                      # (N,)
    rows = np.flatnonzero(mask)                                    # (M,) counted rows
    h_sel = hf.reshape(B * T, -1)[rows]                            # (M, C)
    logits, c_head = layers.linear_forward(h_sel, params["spark.lm_head.weight"])  # (M, V)
    weights = mask[rows].astype(dtype)                             # (M,)
    targets = np.asarray(batch.targets).reshape(-1)[rows]          # (M,)
    loss, c_ce = layers.cross_entropy_forward(logits, targets, weights, denom_of(weights))
    return loss, (c_trunk, rows, hf.shape, c_head, c_ce)


def _pool_loss(params, batch: PoolBatch, denom_of):
    dtype = params["spark.embed.weight"].dtype
    logits, c_fwd = _pool_forward(params, np.asarray(batch.context), batch.context_mask)
    weights = np.ones(logits.shape[0], dtype=dtype)                # (B,) one target per pair
    loss, c_ce = layers.cross_entropy_forward(
        logits, np.asarray(batch.target).reshape(-1), weights, denom_of(weights))
    return loss, (c_fwd, c_ce)


def _mean_denom(weights) -> float:
    return max(float(weights.sum(dtype=np.float64)), 1.0)


def _check_batch(cfg, batch):
    want = TokenBatch if cfg.train_attn else PoolBatch
    if not isinstance(batch, want):
        raise TypeError(f"train_attn={cfg.train_attn} needs a {want.__name__}, "
                        f"got {type(batch).__name__}")


def loss_and_grads(params, cfg: ModelConfig, batch) -> tuple[float, dict[str, np.ndarray]]:
    """Mean CE over the batch's counted targets and its gradient for every tensor.

    A batch with no counted target has loss 0 and zero gradients.
    """
    _check_batch(cfg, batch)
    grads: dict[str, np.ndarray] = {}
    if cfg.train_attn:
        loss, (c_trunk, rows, hshape, c_head, c_ce) = _token_loss(params, cfg, batch, _mean_denom)
        dlogits = layers.cross_entropy_backward(c_ce)              # (M, V)
        dh_sel, grads["spark.lm_head.weight"] = layers.linear_backward(dlogits, c_head)  # (M, C)
        B, T, C = hshape
        dhf = np.zeros((B * T, C), dtype=dh_sel.dtype)             # (N, C) uncounted rows: 0
        dhf[rows] = dh_sel
        _trunk_backward(dhf.reshape(B, T, C), c_trunk, cfg, grads)
    else:
        loss, ((c_emb, c_pool, c_head), c_ce) = _pool_loss(params, batch, _mean_denom)
        dlogits = layers.cross_entropy_backward(c_ce)              # (B, V)
        dh, grads["spark.lm_head.weight"] = layers.linear_backward(dlogits, c_head)  # (B, C)
        de = layers.mean_pool_backward(dh, c_pool)                 # (B, T, C)
        grads["spark.embed.weight"] = layers.embedding_backward(de, c_emb)
    return loss, {name: grads[name] for name in params}


def batch_loss(params, cfg: ModelConfig, batch) -> tuple[float, int]:
    """Forward only: (sum of CE over counted targets, accumulated in float64; count)."""
    _check_batch(cfg, batch)
    if cfg.train_attn:
        loss, _ = _token_loss(params, cfg, batch, lambda w: 1.0)
    else:
        loss, _ = _pool_loss(params, batch, lambda w: 1.0)
    return loss, batch.n_counted
