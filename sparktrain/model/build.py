"""A model from a config: the kind the config names, with its maths. The attention decoder
is transformer.py's; the mean-pool fallback (docs/training.md "Mean-pool fallback") is
here: the prompt's mean embedding through lm_head predicts a pair's first completion byte;
two tensors."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sparktrain.model import backend, layers
from sparktrain.model.base import Model
from sparktrain.model.batch import PoolBatch
from sparktrain.model.config import MeanPoolArch, ModelConfig
from sparktrain.model.transformer import Transformer


class PoolCache(NamedTuple):
    embed: layers.EmbeddingCache
    pool: np.ndarray                 # (B, T) mean_pool's weights
    lm_head: layers.LinearCache


class PoolLossCache(NamedTuple):
    forward: PoolCache
    ce: layers.CrossEntropyCache


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

    def _loss_forward(self, params, batch: PoolBatch, denom_of):
        embed = params["spark.embed.weight"]
        be = backend.of(embed)
        logits, c_fwd = self._forward(params, batch.context, batch.context_mask)  # (B, V)
        weights = np.ones(logits.shape[0], dtype=be.host_dtype(embed))  # (B,) one target per pair
        target = be.asarray(np.asarray(batch.target).reshape(-1), embed)
        loss, c_ce = layers.cross_entropy_forward(
            logits, target, be.asarray(weights, embed), denom_of(weights))
        return loss, PoolLossCache(c_fwd, c_ce)

    def _loss_backward(self, cache: PoolLossCache) -> dict[str, np.ndarray]:
        grads: dict[str, np.ndarray] = {}
        fwd = cache.forward
        # loss = cross_entropy(logits, target)
        dlogits = layers.cross_entropy_backward(cache.ce)              # (B, V)
        # logits = h @ lm_head.T
        dh, grads["spark.lm_head.weight"] = layers.linear_backward(dlogits, fwd.lm_head)
        # h = mean_pool(e, mask)
        de = layers.mean_pool_backward(dh, fwd.pool)                   # (B, T, C)
        # e = embed[context]
        grads["spark.embed.weight"] = layers.embedding_backward(de, fwd.embed)
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


KINDS: dict[str, type[Model]] = {kind.name: kind for kind in (Transformer, MeanPool)}


def build_model(cfg: ModelConfig) -> Model:
    """The attention decoder or the mean-pool fallback, as cfg.kind says."""
    return KINDS[cfg.kind.name](cfg)
