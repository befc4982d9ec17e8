"""The whole model: gradients against finite differences, padding invariance,
consistency of the public functions, init determinism."""
import numpy as np
import pytest

from sparktrain.model import transformer as tr
from sparktrain.model.batch import PoolBatch, TokenBatch
from sparktrain.model.config import SCALES, ModelConfig, param_shapes

from .gradcheck import TOL, check_tensors

ATTN = ModelConfig(dim=8, n_layer=2, n_head=4, n_kv_head=2, seq_len=8)
POOL = ModelConfig(dim=8, n_layer=2, n_head=4, n_kv_head=2, seq_len=8, train_attn=False)


def big_params(cfg, seed=0):
    """float64 weights large enough that every gradient is well above FD noise."""
    rng = np.random.default_rng(seed)
    params = tr.init_params(cfg, seed, b"test", dtype=np.float64)
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


def _gradcheck(cfg, params, batch, used_ids):
    loss, grads = tr.loss_and_grads(params, cfg, batch)
    assert list(grads) == list(params)
    # embed rows never looked up get exactly zero; probe all the used ones
    emb_rows = np.unique(used_ids)
    unused = np.setdiff1d(np.arange(256), emb_rows)
    assert not grads["spark.embed.weight"][unused].any()
    must = {"spark.embed.weight": (emb_rows[:, None] * cfg.dim + np.arange(cfg.dim)).ravel()}
    f = lambda: tr.loss_and_grads(params, cfg, batch)[0]  # noqa: E731
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
    params = tr.init_params(ATTN, 3)
    loss, grads = tr.loss_and_grads(params, ATTN, token_batch())
    assert isinstance(loss, float)
    for name, p in params.items():
        assert grads[name].shape == p.shape and grads[name].dtype == np.float32, name
        assert np.isfinite(grads[name]).all()
    p64 = {n: a.astype(np.float64) for n, a in params.items()}
    loss64, grads64 = tr.loss_and_grads(p64, ATTN, token_batch())
    assert loss == pytest.approx(loss64, rel=1e-5)
    for name in params:
        np.testing.assert_allclose(grads[name], grads64[name], rtol=1e-3,
                                   atol=1e-4 * np.abs(grads64[name]).max(), err_msg=name)
    assert tr.forward_logits(params, ATTN, token_batch().inputs).dtype == np.float32


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
    loss, grads = tr.loss_and_grads(params, ATTN, batch)
    padded = _pad(batch, extra_cols=3, extra_rows=1)
    loss2, grads2 = tr.loss_and_grads(params, ATTN, padded)
    assert loss2 == pytest.approx(loss, rel=1e-12)
    for name in params:
        np.testing.assert_allclose(grads2[name], grads[name], rtol=1e-10, atol=1e-13, err_msg=name)
    assert tr.batch_loss(params, ATTN, padded) == pytest.approx(tr.batch_loss(params, ATTN, batch))
    logits = tr.forward_logits(params, ATTN, batch.inputs)
    logits2 = tr.forward_logits(params, ATTN, padded.inputs)
    np.testing.assert_allclose(logits2[:2, :4], logits[:, :4], rtol=1e-10, atol=1e-12)


def test_pool_padding_changes_nothing():
    params, b = big_params(POOL), pool_batch()
    wide = PoolBatch(np.pad(b.context, ((0, 0), (0, 4)), constant_values=77),
                     np.pad(b.context_mask, ((0, 0), (0, 4))), b.target)
    loss, grads = tr.loss_and_grads(params, POOL, b)
    loss2, grads2 = tr.loss_and_grads(params, POOL, wide)
    assert loss2 == pytest.approx(loss, rel=1e-13)
    for name in params:
        np.testing.assert_allclose(grads2[name], grads[name], rtol=1e-12, atol=1e-15)


def _ce_sum(logits, targets, mask):
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return -(picked * mask).sum()


def test_public_functions_agree():
    params, batch = big_params(ATTN), token_batch()
    total, n = tr.batch_loss(params, ATTN, batch)
    assert n == 7 and isinstance(total, float)
    loss, _ = tr.loss_and_grads(params, ATTN, batch)
    assert loss == pytest.approx(total / n, rel=1e-13)
    logits = tr.forward_logits(params, ATTN, batch.inputs)
    assert logits.shape == (2, 6, 256)
    assert total == pytest.approx(_ce_sum(logits, batch.targets, batch.mask), rel=1e-12)

    pparams, pb = big_params(POOL), pool_batch()
    total, n = tr.batch_loss(pparams, POOL, pb)
    plogits = tr.pool_logits(pparams, POOL, pb.context, pb.context_mask)
    assert plogits.shape == (3, 256) and n == 3
    assert total == pytest.approx(_ce_sum(plogits, pb.target, np.ones(3)), rel=1e-12)
    # the pool is a plain mean of the real tokens' embeddings
    emb = pparams["spark.embed.weight"]
    np.testing.assert_allclose(plogits[1], emb[pb.context[1, :2]].mean(0) @ pparams["spark.lm_head.weight"].T)


def test_step_lowers_loss_and_empty_batch_is_zero():
    params, batch = tr.init_params(ATTN, 0), token_batch()
    loss, grads = tr.loss_and_grads(params, ATTN, batch)
    assert loss == pytest.approx(np.log(256), abs=0.1)  # small init: near uniform
    stepped = {n: params[n] - 0.5 * grads[n] for n in params}
    assert tr.loss_and_grads(stepped, ATTN, batch)[0] < loss
    empty = TokenBatch(batch.inputs, batch.targets, np.zeros_like(batch.mask))
    loss0, grads0 = tr.loss_and_grads(params, ATTN, empty)
    assert loss0 == 0.0 and not any(g.any() for g in grads0.values())


def test_wrong_batch_kind_is_refused():
    with pytest.raises(TypeError):
        tr.loss_and_grads(tr.init_params(POOL, 0), POOL, token_batch())


def test_init_is_deterministic_and_salted():
    cfg = SCALES["tiny"]
    a = tr.init_params(cfg, 7, b"prog")
    b = tr.init_params(cfg, 7, b"prog")
    assert list(a) == list(param_shapes(cfg))
    for name, shape in param_shapes(cfg).items():
        assert a[name].shape == shape and a[name].dtype == np.float32
        assert a[name].tobytes() == b[name].tobytes()
    for other in (tr.init_params(cfg, 7, b"prog2"), tr.init_params(cfg, 8, b"prog")):
        assert a["spark.layers.0.q.weight"].tobytes() != other["spark.layers.0.q.weight"].tobytes()
    assert (a["spark.final_norm.weight"] == 1).all()
    # float64 init is the same draw before the cast
    a64 = tr.init_params(cfg, 7, b"prog", dtype=np.float64)
    np.testing.assert_array_equal(a64["spark.embed.weight"].astype(np.float32), a["spark.embed.weight"])


def test_init_scales():
    cfg = SCALES["large"]
    p = tr.init_params(cfg, 1)
    assert np.std(p["spark.layers.0.q.weight"]) == pytest.approx(0.02, rel=0.05)
    assert np.std(p["spark.layers.0.mlp_down.weight"]) == pytest.approx(0.02 / np.sqrt(8), rel=0.05)
    assert list(tr.init_params(POOL, 1)) == ["spark.embed.weight", "spark.lm_head.weight"]
