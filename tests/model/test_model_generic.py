"""The whole training step through the generic (array-API) code path.

Forward, backward, global-norm clipping and the optimizer's update, on the
params of the default job's tiny scale and of the large scale, SGD and AdamW,
1 and 2 shards (model/parallel.py), with the params and optimizer state on a
non-numpy namespace: array-api-strict in `make test` (it rejects any call
outside the standard), PyTorch under `make test-gpu`. Every loss equals the
numpy path's within 1e-5 relative (docs/gpu.md)."""
from types import SimpleNamespace

import numpy as np
import pytest

from sparktrain.model.base import PoolBatch
from sparktrain.train.bench import synthetic_batch
from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES, ModelConfig
from sparktrain.model.parallel import GradientEngine
from sparktrain.train.optim import clip_scale, grad_norm, lr_at, make_optimizer

from .xpkit import TARGETS, host, target_device

LOSS_RTOL = 1e-5
STEPS = 3


def step_config(optimizer):
    return SimpleNamespace(optimizer=optimizer, momentum=0.9, beta1=0.9, beta2=0.95,
                           weight_decay=0.1, schedule="cosine", lr=3e-2, min_lr=3e-3,
                           warmup=1, clip=1.0, embed_lr=None)


def masked_token_batch(cfg, B=4):
    """Full-length random rows, with a masked prompt and some right padding."""
    b = synthetic_batch(B, cfg.seq_len)
    mask = b.mask.copy()
    mask[0, :5] = 0
    mask[1, -7:] = 0
    return type(b)(b.inputs, b.targets, mask)


def pool_batch(B=5):
    rng = np.random.default_rng(1)
    mask = np.ones((B, 9), np.float32)
    mask[0, 6:] = 0
    return PoolBatch(rng.integers(0, 256, (B, 9)), mask, rng.integers(0, 256, B))


def train(model, params, batch, optimizer, shards, steps=STEPS):
    """What the loop does per micro-step: gradients, clipping, the update. -> losses."""
    step = step_config(optimizer)
    opt = make_optimizer(step, params, list(params))
    losses = []
    with GradientEngine(model, shards, workers=1) as engine:
        for t in range(steps):
            loss, grads = engine.loss_and_grads(params, batch)
            scale = clip_scale(grad_norm(grads, params), step.clip)
            opt.update(params, grads, lr_at(step, t, steps), scale)
            losses.append(loss)
    return losses, opt


CASES = [(scale, opt, shards) for scale in ("tiny", "large") for opt in ("sgd", "adamw")
         for shards in (1, 2)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("scale,optimizer,shards", CASES)
def test_the_step_on_a_namespace_matches_numpy(scale, optimizer, shards, target):
    dev = target_device(target)
    cfg = SCALES[scale]
    model = build_model(cfg)
    batch = masked_token_batch(cfg)
    ref_params = model.init_params(3, b"generic")
    want, ref_opt = train(model, ref_params, batch, optimizer, shards)
    params = dev.to_device(model.init_params(3, b"generic"))
    got, opt = train(model, params, batch, optimizer, shards)
    assert all(isinstance(x, float) for x in got)
    np.testing.assert_allclose(got, want, rtol=LOSS_RTOL)
    assert got[-1] < got[0]  # it trained, on that namespace
    # SGD moves a weight by lr x its gradient: rounding stays rounding. Adam moves
    # every weight by about lr whatever its gradient, so a gradient that is
    # rounding noise may flip its step: bound those by a tenth of the steps taken.
    atol = 1e-5 if optimizer == "sgd" else 0.1 * step_config(optimizer).lr * STEPS
    back = dev.to_host(params)
    for n, p in ref_params.items():
        assert back[n].dtype == np.float32 and back[n].shape == p.shape
        np.testing.assert_allclose(back[n], p, rtol=0, atol=atol)
    state = dev.to_host(opt.state())
    for key, a in ref_opt.state().items():
        np.testing.assert_allclose(state[key], a, rtol=0, atol=1e-3 * max(np.abs(a).max(), 1e-6))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("optimizer,shards", [("sgd", 1), ("adamw", 2)])
def test_the_mean_pool_step_on_a_namespace_matches_numpy(optimizer, shards, target):
    dev = target_device(target)
    model = build_model(ModelConfig(train_attn=False))
    batch = pool_batch()
    want, _ = train(model, model.init_params(3, b"pool"), batch, optimizer, shards)
    got, _ = train(model, dev.to_device(model.init_params(3, b"pool")), batch, optimizer, shards)
    np.testing.assert_allclose(got, want, rtol=LOSS_RTOL)


@pytest.mark.parametrize("target", TARGETS)
def test_float64_gradients_agree_to_rounding(target):
    """The same maths, not just a close one: in float64 every gradient agrees to 1e-10."""
    dev = target_device(target)
    if dev.kind == "mps":
        pytest.skip("MPS has no float64")
    model = build_model(ModelConfig(dim=16, n_layer=2, n_head=4, n_kv_head=2, seq_len=12))
    params = model.init_params(5, b"f64", dtype=np.float64)
    batch = masked_token_batch(model.cfg, B=3)
    want_loss, want = model.loss_and_grads(params, batch)
    got_loss, got = model.loss_and_grads(dev.to_device(params), batch)
    assert got_loss == pytest.approx(want_loss, rel=1e-12)
    assert list(got) == list(want)
    for n in want:
        np.testing.assert_allclose(host(dev, got[n]), want[n], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_forward_only_methods_return_host_arrays(target):
    """Eval and generation read numpy logits whatever the device."""
    dev = target_device(target)
    for cfg in (SCALES["tiny"], ModelConfig(train_attn=False)):
        model = build_model(cfg)
        ref = model.init_params(2, b"eval")
        params = dev.to_device(model.init_params(2, b"eval"))
        windows = np.random.default_rng(0).integers(0, 256, (3, 10))
        lens = np.array([10, 4, 1])
        got = model.next_logits(params, windows, lens)
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, model.next_logits(ref, windows, lens), atol=1e-5)
        batch = masked_token_batch(cfg) if cfg.train_attn else pool_batch()
        assert model.batch_loss(params, batch)[0] == pytest.approx(
            model.batch_loss(ref, batch)[0], rel=LOSS_RTOL)


@pytest.mark.parametrize("target", TARGETS)
def test_two_runs_on_one_device_give_the_same_bytes(target):
    """Deterministic mode and no unordered scatter: a rerun repeats every bit."""
    dev = target_device(target)
    model = build_model(SCALES["tiny"])
    batch = masked_token_batch(model.cfg)
    runs = []
    for _ in range(2):
        params = dev.to_device(model.init_params(4, b"rerun"))
        losses, _ = train(model, params, batch, "adamw", 1)
        runs.append((losses, {n: a.tobytes() for n, a in dev.to_host(params).items()}))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("target", TARGETS)
def test_optimizer_state_resumes_from_host_arrays(target):
    """A checkpoint's optimizer state (host float32) loads back onto the device."""
    dev = target_device(target)
    model = build_model(SCALES["tiny"])
    batch = masked_token_batch(model.cfg)
    params = dev.to_device(model.init_params(4, b"resume"))
    _, opt = train(model, params, batch, "adamw", 1, steps=2)
    saved = dev.to_host(opt.state())
    fresh = make_optimizer(step_config("adamw"), params, list(params))
    fresh.load_state(saved)
    assert fresh.t == opt.t == 2
    for key, a in dev.to_host(fresh.state()).items():
        np.testing.assert_array_equal(a, saved[key])
