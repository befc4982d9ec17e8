"""Each layer's backward against central finite differences (float64), and the
fast paths against their naive references."""
import numpy as np
import pytest

from sparktrain.model import layers

from .gradcheck import TOL, check_tensors
from .reference import (attention_naive, embedding_backward_naive, from_planes, rope_naive,
                        swiglu_naive, to_planes)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _check(forward, inputs: dict, backward_names):
    """Scalar probe f = sum(out * R); backward(R) must match d f / d inputs."""
    rng = _rng(1)
    out, cache = forward(**inputs)
    R = rng.standard_normal(out.shape)
    grads = backward_names(layers_backward=R, cache=cache)
    worst = check_tensors(lambda: float(np.sum(forward(**inputs)[0] * R)),
                          {n: inputs[n] for n in grads}, grads)
    assert max(worst.values()) < TOL, worst


def test_rmsnorm_backward():
    rng = _rng()
    inputs = {"x": rng.standard_normal((2, 3, 5)), "weight": 1 + 0.3 * rng.standard_normal(5)}
    _check(layers.rmsnorm_forward, inputs,
           lambda layers_backward, cache: dict(zip(("x", "weight"),
                                                   layers.rmsnorm_backward(layers_backward, cache))))


def test_linear_backward():
    rng = _rng()
    inputs = {"x": rng.standard_normal((2, 3, 4)), "weight": rng.standard_normal((5, 4))}
    _check(layers.linear_forward, inputs,
           lambda layers_backward, cache: dict(zip(("x", "weight"),
                                                   layers.linear_backward(layers_backward, cache))))


def test_embedding_backward_with_repeated_ids():
    rng = _rng()
    ids = np.array([[1, 3, 3, 0], [6, 1, 1, 1]])
    inputs = {"ids": ids, "weight": rng.standard_normal((7, 4))}
    out, cache = layers.embedding_forward(**inputs)
    R = rng.standard_normal(out.shape)
    dw = layers.embedding_backward(R, cache)
    worst = check_tensors(lambda: float(np.sum(layers.embedding_forward(**inputs)[0] * R)),
                          {"weight": inputs["weight"]}, {"weight": dw})
    assert worst["weight"] < TOL
    assert not dw[[2, 4, 5]].any()  # unused rows get exactly zero


def test_rope_backward():
    rng = _rng()
    inputs = {"u": to_planes(rng.standard_normal((2, 5, 3, 6))), "hd": 6}
    _check(layers.rope_forward, inputs,
           lambda layers_backward, cache: {"u": layers.rope_backward(layers_backward, cache)})


def test_attention_backward_gqa():
    rng = _rng()
    inputs = {"q": rng.standard_normal((2, 4, 5, 3)),
              "k": rng.standard_normal((2, 2, 5, 3)),
              "v": rng.standard_normal((2, 2, 5, 3))}
    _check(layers.attention_forward, inputs,
           lambda layers_backward, cache: dict(zip("qkv", layers.attention_backward(
               layers_backward, cache))))


def test_attention_backward_with_large_scores():
    """Scores past layers.EXP_SAFE take the max-subtracting path; same maths."""
    rng = _rng(5)
    inputs = {"q": 30 * rng.standard_normal((2, 4, 5, 4)),
              "k": 3 * rng.standard_normal((2, 2, 5, 4)),
              "v": rng.standard_normal((2, 2, 5, 4))}
    assert not layers._scores_are_small(inputs["q"] / 2, inputs["k"])
    y, _ = layers.attention_forward(**inputs)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, attention_naive(**inputs), rtol=0, atol=1e-12)
    _check(layers.attention_forward, inputs,
           lambda layers_backward, cache: dict(zip("qkv", layers.attention_backward(
               layers_backward, cache))))


def test_swiglu_backward():
    rng = _rng()
    inputs = {"h": rng.standard_normal((6, 4)),
              "w_gate": rng.standard_normal((16, 4)),
              "w_up": rng.standard_normal((16, 4)),
              "w_down": rng.standard_normal((4, 16))}
    _check(layers.swiglu_forward, inputs,
           lambda layers_backward, cache: dict(zip(("h", "w_gate", "w_up", "w_down"),
                                                   layers.swiglu_backward(layers_backward, cache))))


def test_mean_pool_backward():
    rng = _rng()
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=np.float64)
    x = rng.standard_normal((2, 5, 4))
    out, cache = layers.mean_pool_forward(x, mask)
    R = rng.standard_normal(out.shape)
    dx = layers.mean_pool_backward(R, cache)
    worst = check_tensors(lambda: float(np.sum(layers.mean_pool_forward(x, mask)[0] * R)),
                          {"x": x}, {"x": dx})
    assert worst["x"] < TOL
    assert not dx[0, 3:].any()  # padding gets no gradient
    np.testing.assert_allclose(out[0], x[0, :3].mean(axis=0), rtol=1e-13)


def test_cross_entropy_backward_with_mask():
    rng = _rng()
    logits = 2 * rng.standard_normal((6, 7))
    targets = np.array([0, 3, 6, 6, 2, 1])
    weights = np.array([1, 0, 1, 1, 0, 1], dtype=np.float64)
    loss, cache = layers.cross_entropy_forward(logits, targets, weights, 4.0)
    dlogits = layers.cross_entropy_backward(cache)
    worst = check_tensors(
        lambda: layers.cross_entropy_forward(logits, targets, weights, 4.0)[0],
        {"logits": logits}, {"logits": dlogits})
    assert worst["logits"] < TOL
    assert not dlogits[[1, 4]].any()
    # against an explicit log-softmax
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    assert loss == pytest.approx(-(logp[np.arange(6), targets] * weights).sum() / 4, rel=1e-13)


def test_rope_matches_spec_formula():
    u = _rng().standard_normal((2, 7, 3, 8))                 # (B, T, heads, hd)
    out, _ = layers.rope_forward(to_planes(u), 8)
    np.testing.assert_allclose(from_planes(out, 8), rope_naive(u), rtol=0, atol=1e-12)


def test_planes_round_trip():
    u = _rng(2).standard_normal((2, 5, 3, 6))
    p = to_planes(u)
    assert p.shape == (2, 2, 5, 9)
    np.testing.assert_array_equal(p[0].reshape(2, 5, 3, 3), u[..., :3])
    np.testing.assert_array_equal(from_planes(p, 6), u)


@pytest.mark.parametrize("shape", [(2, 4, 5, 3, 2), (1, 4, 6, 4, 4), (2, 6, 4, 2, 3)])
def test_attention_matches_naive_reference(shape):
    B, H, T, hd, KV = shape
    rng = _rng(3)
    q = rng.standard_normal((B, H, T, hd))
    k = rng.standard_normal((B, KV, T, hd))
    v = rng.standard_normal((B, KV, T, hd))
    fast, _ = layers.attention_forward(q, k, v)
    np.testing.assert_allclose(fast, attention_naive(q, k, v), rtol=0, atol=1e-12)


def test_attention_is_causal():
    rng = _rng(4)
    q, k, v = (rng.standard_normal((1, 2, 6, 4)) for _ in range(3))
    y, _ = layers.attention_forward(q, k, v)
    k2, v2 = k.copy(), v.copy()
    k2[:, :, 4:] += 5
    v2[:, :, 4:] -= 5
    y2, _ = layers.attention_forward(q, k2, v2)
    np.testing.assert_array_equal(y[:, :, :4], y2[:, :, :4])
    assert not np.allclose(y[:, :, 4:], y2[:, :, 4:])


def test_float32_stays_float32():
    rng = _rng()
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    out, cache = layers.rmsnorm_forward(x, w)
    assert out.dtype == np.float32
    assert all(g.dtype == np.float32 for g in layers.rmsnorm_backward(out, cache))
    q = rng.standard_normal((2, 4, 4, 2)).astype(np.float32)
    kv = rng.standard_normal((2, 2, 4, 2)).astype(np.float32)
    rp, c = layers.rope_forward(to_planes(q), 2)
    assert layers.rope_backward(rp, c).dtype == np.float32
    rq = from_planes(rp, 2).transpose(0, 2, 1, 3)
    y, c = layers.attention_forward(rq, kv, kv)
    assert rq.dtype == y.dtype == np.float32
    assert all(g.dtype == np.float32 for g in layers.attention_backward(y, c))


def test_embedding_backward_matches_scatter_add():
    rng = _rng(6)
    ids = rng.integers(0, 9, (3, 7))
    dout = rng.standard_normal((3, 7, 5)).astype(np.float32)
    _, cache = layers.embedding_forward(ids, np.zeros((9, 5), np.float32))
    fast = layers.embedding_backward(dout, cache)
    assert fast.dtype == np.float32
    np.testing.assert_allclose(fast, embedding_backward_naive(dout, ids, 9), rtol=1e-6, atol=1e-6)


def test_swiglu_matches_separate_matmuls():
    rng = _rng(7)
    h, wg, wu, wd = (rng.standard_normal(s) for s in ((6, 4), (16, 4), (16, 4), (4, 16)))
    out, _ = layers.swiglu_forward(h, wg, wu, wd)
    np.testing.assert_allclose(out, swiglu_naive(h, wg, wu, wd), rtol=1e-12, atol=1e-12)


def test_caches_are_named():
    rng = _rng()
    _, c = layers.attention_forward(*(rng.standard_normal((1, 2, 3, 2)) for _ in range(3)))
    assert c._fields == ("qs", "k", "v", "e", "r", "y")
    _, c = layers.rmsnorm_forward(rng.standard_normal((2, 4)), np.ones(4))
    assert c.rstd.shape == (2, 1)
