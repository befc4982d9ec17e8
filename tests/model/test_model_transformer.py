"""The whole model, both kinds: gradients against finite differences, padding
invariance, the fast forward against the naive one, consistency of the
interface's methods, the shape table behind sizes and FLOPs, init determinism."""
import math

import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.model.base import Model, PoolBatch, TokenBatch
from sparktrain.model.build import MeanPool, Transformer, build_model
from sparktrain.model.config import (SCALES, AttentionArch, MeanPoolArch, ModelConfig,
                                     flops_per_token, n_params, param_shapes)

from .gradcheck import TOL, check_tensors
from .reference import forward_logits_naive

ATTN_CFG = ModelConfig(dim=8, n_layer=2, n_head=4, n_kv_head=2, seq_len=8)
POOL_CFG = ModelConfig(dim=8, n_layer=2, n_head=4, n_kv_head=2, seq_len=8, train_attn=False)
ATTN, POOL = build_model(ATTN_CFG), build_model(POOL_CFG)


def big_params(model, seed=0):
    """float64 weights large enough that every gradient is well above FD noise."""
    rng = np.random.default_rng(seed)
    params = model.init_params(seed, b"test", dtype=np.float64)
    for name, a in params.items():
        if a.ndim == 1:
            a += 0.2 * rng.standard_normal(a.shape)
        else:
            a[...] = 0.4 * rng.standard_normal(a.shape)
    return params


def token_batch(B=2, T=6, seed=0):
    """Right-padded rows with prompt targets masked out."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, 256, (B, T))
    targets = rng.integers(0, 256, (B, T))
    mask = np.zeros((B, T))
    mask[0, 2:] = 1          # full-length row, 2 prompt targets
    mask[1, 1:4] = 1         # 4 real tokens + 2 padding
    inputs[1, 4:] = 0
    targets[1, 4:] = 0
    return TokenBatch(inputs, targets, mask)


def pool_batch(seed=0):
    rng = np.random.default_rng(seed)
    context = rng.integers(0, 256, (3, 5))
    cmask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=np.float64)
    context[cmask == 0] = 0
    return PoolBatch(context, cmask, rng.integers(0, 256, 3))


def _gradcheck(model, params, batch, used_ids):
    loss, grads = model.loss_and_grads(params, batch)
    assert list(grads) == list(params)
    # embed rows never looked up get exactly zero; probe all the used ones
    emb_rows = np.unique(used_ids)
    unused = np.setdiff1d(np.arange(256), emb_rows)
    assert not grads["spark.embed.weight"][unused].any()
    dim = model.cfg.dim
    must = {"spark.embed.weight": (emb_rows[:, None] * dim + np.arange(dim)).ravel()}
    f = lambda: model.loss_and_grads(params, batch)[0]  # noqa: E731
    worst = check_tensors(f, params, grads, max_entries=200, must_check=must)
    assert max(worst.values()) < TOL, worst
    return worst


def test_attention_model_gradients():
    batch = token_batch()
    _gradcheck(ATTN, big_params(ATTN), batch, batch.inputs)


def test_pool_model_gradients():
    batch = pool_batch()
    worst = _gradcheck(POOL, big_params(POOL), batch, batch.context[batch.context_mask > 0])
    assert set(worst) == {"spark.embed.weight", "spark.lm_head.weight"}


def test_grads_match_params_in_float32():
    params = ATTN.init_params(3)
    loss, grads = ATTN.loss_and_grads(params, token_batch())
    assert isinstance(loss, float)
    for name, p in params.items():
        assert grads[name].shape == p.shape and grads[name].dtype == np.float32, name
        assert np.isfinite(grads[name]).all()
    p64 = {n: a.astype(np.float64) for n, a in params.items()}
    loss64, grads64 = ATTN.loss_and_grads(p64, token_batch())
    assert loss == pytest.approx(loss64, rel=1e-5)
    for name in params:
        np.testing.assert_allclose(grads[name], grads64[name], rtol=1e-3,
                                   atol=1e-4 * np.abs(grads64[name]).max(), err_msg=name)
    assert ATTN.forward_logits(params, token_batch().inputs).dtype == np.float32


def _pad(batch: TokenBatch, extra_cols, extra_rows, seed=9):
    rng = np.random.default_rng(seed)
    B, T = batch.inputs.shape
    shape = (B + extra_rows, T + extra_cols)
    inputs = rng.integers(0, 256, shape)   # padding content must not matter
    targets = rng.integers(0, 256, shape)
    mask = np.zeros(shape)
    inputs[:B, :T], targets[:B, :T], mask[:B, :T] = batch.inputs, batch.targets, batch.mask
    return TokenBatch(inputs, targets, mask)


def test_padding_changes_neither_loss_nor_grads():
    params, batch = big_params(ATTN), token_batch()
    loss, grads = ATTN.loss_and_grads(params, batch)
    padded = _pad(batch, extra_cols=3, extra_rows=1)
    loss2, grads2 = ATTN.loss_and_grads(params, padded)
    assert loss2 == pytest.approx(loss, rel=1e-12)
    for name in params:
        np.testing.assert_allclose(grads2[name], grads[name], rtol=1e-10, atol=1e-13, err_msg=name)
    assert ATTN.batch_loss(params, padded) == pytest.approx(ATTN.batch_loss(params, batch))
    logits = ATTN.forward_logits(params, batch.inputs)
    logits2 = ATTN.forward_logits(params, padded.inputs)
    np.testing.assert_allclose(logits2[:2, :4], logits[:, :4], rtol=1e-10, atol=1e-12)


def test_pool_padding_changes_nothing():
    params, b = big_params(POOL), pool_batch()
    wide = PoolBatch(np.pad(b.context, ((0, 0), (0, 4)), constant_values=77),
                     np.pad(b.context_mask, ((0, 0), (0, 4))), b.target)
    loss, grads = POOL.loss_and_grads(params, b)
    loss2, grads2 = POOL.loss_and_grads(params, wide)
    assert loss2 == pytest.approx(loss, rel=1e-13)
    for name in params:
        np.testing.assert_allclose(grads2[name], grads[name], rtol=1e-12, atol=1e-15)


def _ce_sum(logits, targets, mask):
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return -(picked * mask).sum()


def test_public_functions_agree():
    params, batch = big_params(ATTN), token_batch()
    total, n = ATTN.batch_loss(params, batch)
    assert n == 7 and isinstance(total, float)
    loss, _ = ATTN.loss_and_grads(params, batch)
    assert loss == pytest.approx(total / n, rel=1e-13)
    logits = ATTN.forward_logits(params, batch.inputs)
    assert logits.shape == (2, 6, 256)
    assert total == pytest.approx(_ce_sum(logits, batch.targets, batch.mask), rel=1e-12)

    pparams, pb = big_params(POOL), pool_batch()
    total, n = POOL.batch_loss(pparams, pb)
    plogits = POOL.pool_logits(pparams, pb.context, pb.context_mask)
    assert plogits.shape == (3, 256) and n == 3
    assert total == pytest.approx(_ce_sum(plogits, pb.target, np.ones(3)), rel=1e-12)
    # the pool is a plain mean of the real tokens' embeddings
    emb = pparams["spark.embed.weight"]
    np.testing.assert_allclose(plogits[1], emb[pb.context[1, :2]].mean(0) @ pparams["spark.lm_head.weight"].T)


def test_step_lowers_loss_and_empty_batch_is_zero():
    params, batch = ATTN.init_params(0), token_batch()
    loss, grads = ATTN.loss_and_grads(params, batch)
    assert loss == pytest.approx(np.log(256), abs=0.1)  # small init: near uniform
    stepped = {n: params[n] - 0.5 * grads[n] for n in params}
    assert ATTN.loss_and_grads(stepped, batch)[0] < loss
    empty = TokenBatch(batch.inputs, batch.targets, np.zeros_like(batch.mask))
    loss0, grads0 = ATTN.loss_and_grads(params, empty)
    assert loss0 == 0.0 and not any(g.any() for g in grads0.values())


def test_wrong_batch_kind_is_refused():
    with pytest.raises(TypeError, match="pool model needs a PoolBatch"):
        POOL.loss_and_grads(POOL.init_params(0), token_batch())
    with pytest.raises(TypeError, match="attn model needs a TokenBatch"):
        ATTN.batch_loss(ATTN.init_params(0), pool_batch())


def test_init_is_deterministic_and_salted():
    model = build_model(SCALES["tiny"])
    a = model.init_params(7, b"prog")
    b = model.init_params(7, b"prog")
    assert list(a) == list(model.param_shapes())
    for name, shape in model.param_shapes().items():
        assert a[name].shape == shape and a[name].dtype == np.float32
        assert a[name].tobytes() == b[name].tobytes()
    for other in (model.init_params(7, b"prog2"), model.init_params(8, b"prog")):
        assert a["spark.layers.0.q.weight"].tobytes() != other["spark.layers.0.q.weight"].tobytes()
    assert (a["spark.final_norm.weight"] == 1).all()
    # float64 init is the same draw before the cast
    a64 = model.init_params(7, b"prog", dtype=np.float64)
    np.testing.assert_array_equal(a64["spark.embed.weight"].astype(np.float32), a["spark.embed.weight"])


def test_init_scales():
    p = build_model(SCALES["large"]).init_params(1)
    assert np.std(p["spark.layers.0.q.weight"]) == pytest.approx(0.02, rel=0.05)
    assert np.std(p["spark.layers.0.mlp_down.weight"]) == pytest.approx(0.02 / np.sqrt(8), rel=0.05)
    assert list(POOL.init_params(1)) == ["spark.embed.weight", "spark.lm_head.weight"]


# ------------------------------------------------------------ the interface

def test_build_model_picks_the_kind_once():
    assert isinstance(ATTN, Transformer) and ATTN.name == "attn" and ATTN.cfg is ATTN_CFG
    assert isinstance(POOL, MeanPool) and POOL.name == "pool" and POOL.cfg is POOL_CFG
    assert ATTN.max_new_tokens is None and POOL.max_new_tokens == 1
    # train_attn is read once, by ModelConfig.kind; the maths extend that architecture
    assert ATTN_CFG.kind is AttentionArch and POOL_CFG.kind is MeanPoolArch
    assert isinstance(ATTN, AttentionArch) and isinstance(POOL, MeanPoolArch)
    # every kind-specific method is the kind's own, none left to the base; the loss
    # and its gradients are written once, in the base, over the kind's loss pair
    for name in ("param_shapes", "_loss_forward", "_loss_backward", "scored_logits",
                 "next_logits"):
        for kind in (Transformer, MeanPool):
            assert getattr(kind, name) is not getattr(Model, name), (kind, name)
    for name in ("loss_and_grads", "batch_loss"):
        for kind in (Transformer, MeanPool):
            assert getattr(kind, name) is getattr(Model, name), (kind, name)


def test_bad_attention_arch_is_refused_by_the_kind_not_the_fallback():
    for bad, needle in ((dict(dim=30), "not divisible by n_head"),
                        (dict(n_head=4, n_kv_head=3), "not a multiple of n_kv_head"),
                        (dict(dim=12, n_head=4, n_kv_head=2), "RoPE needs an even head dim")):
        cfg = ModelConfig(**{**ATTN_CFG.to_dict(), **bad})
        with pytest.raises(SparkError, match=needle):
            cfg.validate()
        # the mean-pool model has no heads: the same numbers build
        ModelConfig(**{**cfg.to_dict(), "train_attn": False}).validate()


@pytest.mark.parametrize("cfg", [ATTN_CFG, POOL_CFG, SCALES["tiny"], SCALES["large"],
                                 ModelConfig(dim=48, n_layer=3, n_head=6, n_kv_head=3, seq_len=20)])
def test_n_params_and_flops_come_from_the_shape_table(cfg):
    model = build_model(cfg)
    table = param_shapes(cfg)
    assert table == model.param_shapes()
    size = sum(math.prod(shape) for shape in table.values())
    assert n_params(cfg) == model.n_params == size
    assert sum(p.size for p in model.init_params(0).values()) == size
    # 6 FLOPs per weight and token, plus attention's 12 * n_layer * dim * T (none when pooling)
    for T in (1, 7, cfg.seq_len):
        mixing = 12 * cfg.n_layer * cfg.dim * T if cfg.train_attn else 0
        assert flops_per_token(cfg, T) == model.flops_per_token(T) == 6 * size + mixing
    assert flops_per_token(cfg) == model.flops_per_token(cfg.seq_len)


def test_known_sizes():
    """Counted by hand from docs/model.md's table: guards the table itself."""
    d, v, L = 32, 256, 2
    per_layer = d + d * d + 2 * (16 * d) + d * d + d + 3 * 4 * d * d   # kv_dim 16
    assert n_params(SCALES["tiny"]) == 2 * v * d + d + L * per_layer == 47264
    assert n_params(POOL_CFG) == 2 * 256 * 8


def test_fast_forward_matches_the_naive_model():
    params = big_params(ATTN, seed=3)
    inputs = np.random.default_rng(3).integers(0, 256, (2, 7))
    fast = ATTN.forward_logits(params, inputs)
    np.testing.assert_allclose(fast, forward_logits_naive(params, ATTN_CFG, inputs),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("model, batch", [(ATTN, token_batch()), (POOL, pool_batch())])
def test_scored_logits_agree_with_batch_loss(model, batch):
    params = big_params(model, seed=4)
    logits, targets, mask = model.scored_logits(params, batch)
    assert logits.shape == targets.shape + (256,) and mask.shape == targets.shape
    total, n = model.batch_loss(params, batch)
    assert n == int(mask.sum()) == batch.n_counted
    assert total == pytest.approx(_ce_sum(logits, targets, mask), rel=1e-12)


def test_next_logits_read_each_rows_own_last_position():
    params = big_params(ATTN, seed=5)
    batch = token_batch()
    lens = np.array([6, 4])
    full = ATTN.forward_logits(params, batch.inputs)
    np.testing.assert_array_equal(ATTN.next_logits(params, batch.inputs, lens),
                                  full[[0, 1], [5, 3]])
    pparams, pb = big_params(POOL, seed=5), pool_batch()
    np.testing.assert_array_equal(
        POOL.next_logits(pparams, pb.context, pb.context_mask.sum(axis=1).astype(int)),
        POOL.pool_logits(pparams, pb.context, pb.context_mask))
