"""The two model kinds with their maths, in the params' array namespace and dtype
(docs/model.md "The model", docs/gpu.md): Transformer, the Spark decoder with its
hand-written backward, and MeanPool, the fallback. Batches arrive on the host, which works
out the counted positions. Sampling from a model: model/sampling.py."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.model import backend, layers, options
from sparktrain.model.base import Model, PoolBatch, TokenBatch
from sparktrain.model.config import (BIGRAM, SKIP, VALUE_MIX, AttentionArch, MeanPoolArch,
                                     ModelConfig, layer_names)
from sparktrain.model.dropout import Dropout
from sparktrain.vocab import BYTE_VOCAB


class BlockCache(NamedTuple):
    attn_norm: layers.RmsNormCache   # h = rmsnorm(x, attn_norm)
    h2: np.ndarray                   # (N, C) h, rows flattened
    w_planes: np.ndarray             # (2, X, C) q and k weights as rope's two planes
    w_v: np.ndarray                  # (KV hd, C)
    value_mix: options.ValueMixCache | None  # v = (1 - lam) v + lam v1 (value_residual, L > 0)
    rope: layers.RopeCache
    qk_norm: layers.RmsNormCache | None  # heads = rmsnorm(heads) per head (qk_norm option)
    attention: layers.AttentionCache
    o: layers.LinearCache            # att_out = y @ Wo.T
    mlp_norm: layers.RmsNormCache
    mlp: layers.SwigluCache | options.Relu2Cache
    drop_attn: np.ndarray | None = None  # att_out *= mask (step.dropout, training only)
    drop_mlp: np.ndarray | None = None   # mlp_out *= mask


class TrunkCache(NamedTuple):
    embed: layers.EmbeddingCache
    bigram: layers.EmbeddingCache | None  # x += bigram[hash(prev, cur)] (bigram option)
    blocks: list[BlockCache]         # one per layer
    skips: dict[int, options.SkipCache]  # x = x + w skip before block L (unet option), by L
    final_norm: layers.RmsNormCache


class LossCache(NamedTuple):
    trunk: TrunkCache
    rows: np.ndarray                 # (M,) flat indices of the counted positions
    hidden_shape: tuple              # (B, T, C)
    lm_head: layers.LinearCache
    cap: options.SoftCapCache | None  # logits = cap * tanh(logits / cap) (logit_cap option)
    ce: layers.CrossEntropyCache


def _qk_planes(w_q, w_k, half):
    """[Wq; Wk] with rows regrouped as rope's two planes: (2, X, C), X = (H + KV) * hd/2
    (plane p, row h * half + i is row h * hd + p * half + i; docs/model.md)."""
    be = backend.of(w_q)
    xp = be.xp
    w_qk = be.concat([w_q, w_k])                                   # ((H + KV) hd, C)
    heads, C = w_qk.shape[0] // (2 * half), w_qk.shape[1]
    planes = be.contiguous(be.permute(xp.reshape(w_qk, (heads, 2, half, C)), (1, 0, 2, 3)))
    return xp.reshape(planes, (2, heads * half, C))


# The MLP of each `mlp` option: its tensors' short names (after the input), forward, backward
MLPS = {"swiglu": (("mlp_gate", "mlp_up", "mlp_down"), layers.swiglu_forward,
                   layers.swiglu_backward),
        "relu2": (("mlp_up", "mlp_down"), options.relu2_forward, options.relu2_backward)}


class Transformer(AttentionArch, Model):
    """The attention decoder's maths, trained on every counted next byte; the options of
    cfg (docs/model.md "Architecture options") each one more layer pair in the chain."""
    batch_type = TokenBatch

    def _block_forward(self, x, params, L, v1=None, drop: Dropout | None = None):
        """One pre-norm block: x (B, T, C) -> (B, T, C), BlockCache, its values (N, KV hd);
        q and k come out as rope's two planes (_qk_planes), regrouped per head after rope.
        v1: the first block's values, mixed into these (value_residual), else None; drop:
        training's dropout on the two branch outputs, else None."""
        w = {k: params[n] for k, n in layer_names(L).items() if n in params}
        mlp_names, mlp_forward, _ = MLPS[self.cfg.mlp]
        be = backend.of(x)
        xp = be.xp
        B, T, C = x.shape
        H, KV, hd = self.cfg.n_head, self.cfg.n_kv_head, self.cfg.head_dim
        half, N = hd // 2, B * T
        w_planes = _qk_planes(w["q"], w["k"], half)                   # (2, X, C)
        h, c_n1 = layers.rmsnorm_forward(x, w["attn_norm"])            # (B, T, C)
        h2 = xp.reshape(h, (N, C))                                     # (N, C)
        qk = h2 @ be.mT(w_planes)                                      # (2, N, X) = h @ [Wq; Wk].T
        qk, c_rope = layers.rope_forward(xp.reshape(qk, (2, B, T, -1)), hd)  # (2, B, T, X)
        # one copy regroups the planes per head (rope on strided planes costs more than it)
        heads = be.contiguous(be.permute(xp.reshape(qk, (2, B, T, H + KV, half)),
                                         (1, 3, 2, 0, 4)))
        heads = xp.reshape(heads, (B, H + KV, T, hd))                  # (B, H + KV, T, hd)
        c_qk = None
        if self.cfg.qk_norm:  # rope rotates pairs: the norm of a head is the same before it
            heads, c_qk = layers.rmsnorm_forward(heads, be.ones((hd,), heads))
        v2 = h2 @ w["v"].T                                             # (N, KV hd)
        c_mix = None
        if v1 is not None:
            lam = params[VALUE_MIX][L - 1:L]                           # (1,)
            v2, c_mix = options.value_mix_forward(v2, v1, lam)         # (N, KV hd)
        v = be.permute(xp.reshape(v2, (B, T, KV, hd)), (0, 2, 1, 3))   # (B, KV, T, hd) a view
        y, c_att = layers.attention_forward(heads[:, :H, ...], heads[:, H:, ...], v)  # (B,H,T,hd)
        y = xp.reshape(be.permute(y, (0, 2, 1, 3)), (B, T, C))        # (B, T, C) numpy: a view
        att_out, c_o = layers.linear_forward(y, w["o"])                # (B, T, C)
        m_attn = m_mlp = None
        if drop is not None:                                           # att_out = dropout(att_out)
            att_out *= (m_attn := drop.mask(L, "attn", att_out))
        att_out += x                                                   # x = x + att_out
        x = att_out                                                    # (B, T, C)
        h2n, c_n2 = layers.rmsnorm_forward(x, w["mlp_norm"])           # (B, T, C)
        mlp_out, c_mlp = mlp_forward(xp.reshape(h2n, (N, C)),
                                     *(w[k] for k in mlp_names))      # (N, C)
        mlp_out = xp.reshape(mlp_out, (B, T, C))
        if drop is not None:                                           # mlp_out = dropout(mlp_out)
            mlp_out *= (m_mlp := drop.mask(L, "mlp", mlp_out))
        mlp_out += x                                                   # x = x + mlp_out
        return mlp_out, BlockCache(c_n1, h2, w_planes, w["v"], c_mix, c_rope, c_qk, c_att, c_o,
                                   c_n2, c_mlp, m_attn, m_mlp), v2

    def _block_backward(self, dx, cache: BlockCache, L, grads, dv1=None):
        """Reverse of _block_forward; writes this layer's grads, returns dx (B, T, C), the
        gradient of the first block's values so far (value_residual; None once block 0 took
        it, or without the option) and that of the block's mixing weight (or None)."""
        names = layer_names(L)
        be = backend.of(dx)
        xp = be.xp
        B, T, C = dx.shape
        H, KV, hd = self.cfg.n_head, self.cfg.n_kv_head, self.cfg.head_dim
        N = B * T
        mlp_names, _, mlp_backward = MLPS[self.cfg.mlp]
        # x = x + mlp_out ; mlp_out = mlp(h2n) (* mask)
        dmlp = dx if cache.drop_mlp is None else dx * cache.drop_mlp    # (B, T, C)
        dh2n, *dw_mlp = mlp_backward(xp.reshape(dmlp, (N, C)), cache.mlp)  # (N, C)
        grads.update((names[k], dw) for k, dw in zip(mlp_names, dw_mlp))
        # h2n = rmsnorm(x, mlp_norm)
        dxn, grads[names["mlp_norm"]] = layers.rmsnorm_backward(xp.reshape(dh2n, (B, T, C)),
                                                                cache.mlp_norm)
        dxn += dx                                                      # dx = dx + dxn
        dx = dxn                                                       # (B, T, C)
        # x = x + att_out ; att_out = (y @ Wo.T) (* mask)
        datt = dx if cache.drop_attn is None else dx * cache.drop_attn  # (B, T, C)
        dy, grads[names["o"]] = layers.linear_backward(datt, cache.o)  # (B, T, C)
        dy = be.permute(xp.reshape(dy, (B, T, H, hd)), (0, 2, 1, 3))   # (B, H, T, hd) a view
        # y = attention(heads[:, :H], heads[:, H:], v); numpy writes dq beside dk, and dv
        # as (B, T, KV, hd), so neither needs regrouping after
        dheads, dvt = be.empty((B, H + KV, T, hd), dx), be.empty((B, T, KV, hd), dx)
        dq, dk, dv = layers.attention_backward(dy, cache.attention, out=(dheads, dvt))
        if not be.writes_out:
            dheads = be.concat([dq, dk], axis=1)                       # (B, H + KV, T, hd)
            dvt = be.permute(dv, (0, 2, 1, 3))                         # (B, T, KV, hd)
        # v = (h2 @ Wv.T) regrouped per head
        dv2 = xp.reshape(dvt, (N, KV * hd))                            # (N, KV hd)
        dlam = None
        if cache.value_mix is not None:
            # v = (1 - lam) v + lam v1
            dv2, dv1_here, dlam = options.value_mix_backward(dv2, cache.value_mix)
            dv1 = dv1_here if dv1 is None else dv1 + dv1_here         # (N, KV hd)
        elif dv1 is not None:  # block 0: its values are v1 too
            dv2, dv1 = dv2 + dv1, None
        grads[names["v"]] = dv2.T @ cache.h2                           # (KV hd, C)
        dh = dv2 @ cache.w_v                                           # (N, C)
        if cache.qk_norm is not None:
            # heads = rmsnorm(heads) (a weight of ones, its gradient unused)
            dheads, _ = layers.rmsnorm_backward(dheads, cache.qk_norm)
        dh = self._qk_backward(dheads, cache, dh, names, grads)        # dh + the q, k path's
        # h = rmsnorm(x, attn_norm)
        dxn, grads[names["attn_norm"]] = layers.rmsnorm_backward(xp.reshape(dh, (B, T, C)),
                                                                 cache.attn_norm)
        dxn += dx                                                      # dx + dxn
        return dxn, dv1, dlam

    def _qk_backward(self, dheads, cache: BlockCache, dh, names, grads):
        """Reverse of q and k as rope's two planes (_qk_planes, rope, the regrouping per
        head): dheads (B, H + KV, T, hd) -> dh (N, C) plus their input gradient (added in
        place where the array allows); the q and k grads written."""
        be = backend.of(dheads)
        xp = be.xp
        B, HKV, T, hd = dheads.shape
        H, half, N, C = self.cfg.n_head, hd // 2, B * T, dh.shape[1]
        # heads = planes regrouped per head
        dqk = be.contiguous(be.permute(xp.reshape(dheads, (B, HKV, T, 2, half)),
                                       (3, 0, 2, 1, 4)))
        dqk = xp.reshape(dqk, (2, B, T, -1))                           # (2, B, T, X)
        # qk = rope(planes)
        dqk = xp.reshape(layers.rope_backward(dqk, cache.rope), (2, N, -1))  # (2, N, X)
        # planes = h2 @ w_planes.T (per plane)
        dw_planes = be.mT(dqk) @ cache.h2                              # (2, X, C)
        dh += dqk[0, ...] @ cache.w_planes[0, ...]
        dh += dqk[1, ...] @ cache.w_planes[1, ...]
        dw_qk = xp.reshape(be.permute(xp.reshape(dw_planes, (2, HKV, half, C)), (1, 0, 2, 3)),
                           (-1, C))
        grads[names["q"]], grads[names["k"]] = dw_qk[:H * hd, ...], dw_qk[H * hd:, ...]
        return dh

    def _trunk_forward(self, params, host_inputs, drop: Dropout | None = None):
        """embed -> blocks -> final norm: host inputs (B, T) -> hidden (B, T, C), TrunkCache;
        drop: training's dropout (model/dropout.py), None everywhere else."""
        embed = params["spark.embed.weight"]
        be = backend.of(embed)
        x, c_emb = layers.embedding_forward(be.asarray(host_inputs, embed), embed)  # (B, T, C)
        c_big = None
        if self.cfg.bigram:
            ids = options.bigram_ids(host_inputs, self.cfg.vocab, self.cfg.bigram)  # (B, T)
            xb, c_big = layers.embedding_forward(be.asarray(ids, embed), params[BIGRAM])
            x = x + xb                                                 # (B, T, C)
        n = self.cfg.n_layer
        skip_from = n - n // 2 if self.cfg.unet else n  # blocks from here take a skip
        c_blocks, c_skips, outs, v1 = [], {}, [], None
        for L in range(n):
            if L >= skip_from:  # block n-1-i's input takes block i's output, weighted
                i = n - 1 - L
                x, c_skips[L] = options.skip_forward(x, outs[i], params[SKIP][i:i + 1])
            x, c, v = self._block_forward(x, params, L, v1, drop)      # (B, T, C)
            c_blocks.append(c)
            if L < n - skip_from:
                outs.append(x)
            if L == 0 and self.cfg.value_residual:
                v1 = v                                                 # (N, KV hd)
        hf, c_fn = layers.rmsnorm_forward(x, params["spark.final_norm.weight"])  # (B, T, C)
        return hf, TrunkCache(c_emb, c_big, c_blocks, c_skips, c_fn)

    def _trunk_backward(self, dhf, cache: TrunkCache, grads):
        """Reverse of _trunk_forward; writes the grads of every tensor but lm_head."""
        # hf = rmsnorm(x, final_norm)
        dx, grads["spark.final_norm.weight"] = layers.rmsnorm_backward(dhf, cache.final_norm)
        n = self.cfg.n_layer
        dv1, dlams, dskips, dws = None, {}, {}, {}
        for L in reversed(range(n)):
            if L in dskips:
                # block L's output went on as block n-1-L's skip too
                dx = dx + dskips.pop(L)                                # (B, T, C)
            dx, dv1, dlams[L] = self._block_backward(dx, cache.blocks[L], L, grads, dv1)
            if L in cache.skips:
                # x = x + w skip, skip = block (n-1-L)'s output
                dx, dskips[n - 1 - L], dws[n - 1 - L] = options.skip_backward(dx, cache.skips[L])
        be = backend.of(dx)
        if self.cfg.value_residual:
            grads[VALUE_MIX] = be.concat([dlams[L] for L in range(1, n)])  # (n - 1,)
        if self.cfg.unet:
            grads[SKIP] = be.concat([dws[i] for i in range(n // 2)])      # (n // 2,)
        if cache.bigram is not None:
            # x = x + bigram[ids]
            grads[BIGRAM] = layers.embedding_backward(dx, cache.bigram, sparse=True)
        # x = embed[inputs]; a BPE table's gradient over only the rows a batch used (its
        # one-hot product over the whole table was a twentieth of a proof step), a byte
        # table's over all its rows (the bytes of every byte model, the default job's too)
        grads["spark.embed.weight"] = layers.embedding_backward(
            dx, cache.embed, sparse=self.cfg.vocab > BYTE_VOCAB)

    def _loss_forward(self, params, batch: TokenBatch, denom_of, drop: Dropout | None = None):
        """Only counted rows go through lm_head: the others carry weight 0."""
        embed = params["spark.embed.weight"]
        be = backend.of(embed)
        xp = be.xp
        B, T = np.shape(batch.inputs)
        hf, c_trunk = self._trunk_forward(params, batch.inputs, drop)  # (B, T, C)
        mask = np.asarray(batch.mask).reshape(-1)                      # (N,) host
        rows = np.flatnonzero(mask)                                    # (M,) counted rows, host
        h_sel = be.take_rows(xp.reshape(hf, (B * T, -1)), rows)        # (M, C)
        logits, c_head = layers.linear_forward(h_sel, params["spark.lm_head.weight"])  # (M, V)
        c_cap = None
        if self.cfg.logit_cap:
            logits, c_cap = options.softcap_forward(logits, self.cfg.logit_cap)  # (M, V)
        weights = mask[rows].astype(be.host_dtype(embed))              # (M,) host
        targets = np.asarray(batch.targets).reshape(-1)[rows]          # (M,) host
        denom = denom_of(weights)
        loss, c_ce = layers.cross_entropy_forward(
            logits, be.asarray(targets, embed), be.asarray(weights, embed), denom)
        return loss, LossCache(c_trunk, rows, hf.shape, c_head, c_cap, c_ce)

    def _loss_backward(self, cache: LossCache) -> dict[str, np.ndarray]:
        grads: dict[str, np.ndarray] = {}
        # loss = cross_entropy(logits, targets, weights)
        dlogits = layers.cross_entropy_backward(cache.ce)              # (M, V)
        if cache.cap is not None:
            # logits = softcap(logits)
            dlogits = options.softcap_backward(dlogits, cache.cap)
        # logits = h_sel @ lm_head.T
        dh_sel, grads["spark.lm_head.weight"] = layers.linear_backward(dlogits, cache.lm_head)
        # h_sel = hf[rows] (uncounted rows: 0)
        be = backend.of(dh_sel)
        B, T, C = cache.hidden_shape
        dhf = be.scatter_rows(dh_sel, cache.rows, B * T)               # (N, C)
        self._trunk_backward(be.xp.reshape(dhf, (B, T, C)), cache.trunk, grads)
        return grads

    def forward_logits(self, params, inputs):
        """inputs (B, T) int -> logits (B, T, 256) at every position, where params live."""
        hf, _ = self._trunk_forward(params, inputs)                    # (B, T, C)
        logits, _ = layers.linear_forward(hf, params["spark.lm_head.weight"])
        if self.cfg.logit_cap:
            logits, _ = options.softcap_forward(logits, self.cfg.logit_cap)
        return logits                                                  # (B, T, V)

    def scored_logits(self, params, batch):
        self.check_batch(batch)
        logits = self.forward_logits(params, batch.inputs)             # (B, T, V)
        return backend.of(logits).to_host(logits), batch.targets, batch.mask

    def next_logits(self, params, windows, lens):
        logits = self.forward_logits(params, windows)                  # (A, T, V)
        return backend.of(logits).last_rows(logits, lens)              # (A, V) host


class PoolCache(NamedTuple):
    embed: layers.EmbeddingCache
    pool: np.ndarray                 # (B, T) mean_pool's weights
    lm_head: layers.LinearCache
    ce: layers.CrossEntropyCache | None = None  # the loss's; None after a plain forward


class MeanPool(MeanPoolArch, Model):
    batch_type = PoolBatch
    max_new_tokens = 1    # it only ever predicts the first completion byte

    def _forward(self, params, context, context_mask):
        """context (B, T) int, context_mask (B, T) -> logits (B, V), PoolCache.
        Host arrays in; the logits stay where the params live."""
        embed = params["spark.embed.weight"]
        be = backend.of(embed)
        mask = be.asarray(context_mask, embed, embed.dtype)            # (B, T)
        e, c_emb = layers.embedding_forward(be.asarray(context, embed), embed)
        h, c_pool = layers.mean_pool_forward(e, mask)                  # (B, C)
        logits, c_head = layers.linear_forward(h, params["spark.lm_head.weight"])  # (B, V)
        return logits, PoolCache(c_emb, c_pool, c_head)

    def _loss_forward(self, params, batch: PoolBatch, denom_of, drop: Dropout | None = None):
        if drop is not None:  # loop.py refuses the knob first: no residual branch here
            raise SparkError("step.dropout needs the attention model (step.train_attn true)")
        embed = params["spark.embed.weight"]
        be = backend.of(embed)
        logits, c_fwd = self._forward(params, batch.context, batch.context_mask)  # (B, V)
        weights = np.ones(logits.shape[0], dtype=be.host_dtype(embed))  # (B,) one target per pair
        target = be.asarray(np.asarray(batch.target).reshape(-1), embed)
        loss, c_ce = layers.cross_entropy_forward(
            logits, target, be.asarray(weights, embed), denom_of(weights))
        return loss, c_fwd._replace(ce=c_ce)

    def _loss_backward(self, cache: PoolCache) -> dict[str, np.ndarray]:
        grads: dict[str, np.ndarray] = {}
        # loss = cross_entropy(logits, target)
        dlogits = layers.cross_entropy_backward(cache.ce)              # (B, V)
        # logits = h @ lm_head.T
        dh, grads["spark.lm_head.weight"] = layers.linear_backward(dlogits, cache.lm_head)
        # h = mean_pool(e, mask)
        de = layers.mean_pool_backward(dh, cache.pool)                   # (B, T, C)
        # e = embed[context]
        grads["spark.embed.weight"] = layers.embedding_backward(de, cache.embed)
        return grads

    def pool_logits(self, params, context, context_mask) -> np.ndarray:
        """context (B, T) int, context_mask (B, T) -> logits (B, 256), on the host."""
        logits, _ = self._forward(params, context, context_mask)
        return backend.of(logits).to_host(logits)

    def scored_logits(self, params, batch):
        self.check_batch(batch)
        logits = self.pool_logits(params, batch.context, batch.context_mask)  # (B, V)
        target = np.asarray(batch.target)                              # (B,)
        return logits[:, None], target[:, None], np.ones((len(target), 1))  # T = 1

    def next_logits(self, params, windows, lens):
        live = (np.arange(windows.shape[1]) < lens[:, None]).astype(np.float32)  # (A, T)
        return self.pool_logits(params, windows, live)                 # (A, V)


def build_model(cfg: ModelConfig) -> Model:
    """The attention decoder or the mean-pool fallback, as cfg.kind says."""
    return {AttentionArch: Transformer, MeanPoolArch: MeanPool}[cfg.kind](cfg)
