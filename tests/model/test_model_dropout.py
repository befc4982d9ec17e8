"""step.dropout (model/dropout.py, docs/training.md "Reading the data more than once"): its gradient, its masks (a
pure function of seed, micro-step, row, layer and site, at rate p), the same bytes with any
worker count, and the array-API path taking the host masks."""
import numpy as np
import pytest

from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig
from sparktrain.model.dropout import Dropout
from sparktrain.model.parallel import GradientEngine

from .gradcheck import TOL, check_tensors
from .test_model_parallel import ATTN, result_bytes, token_batch as long_batch
from .test_model_transformer import big_params, token_batch
from .xpkit import TARGETS, host, target_device

BASE = dict(dim=16, n_layer=2, n_head=4, n_kv_head=2, seq_len=8)
DROP = Dropout(0.3, 1, 5)


@pytest.mark.parametrize("mlp", ["swiglu", "relu2"])
def test_the_gradient_with_dropout_is_the_finite_differences_of_its_loss(mlp):
    model = build_model(ModelConfig(**BASE, mlp=mlp))
    params, batch = big_params(model), token_batch()
    loss, grads = model.loss_and_grads(params, batch, None, DROP)
    assert loss != model.loss_and_grads(params, batch)[0]  # the masks change the maths
    worst = check_tensors(lambda: model.loss_and_grads(params, batch, None, DROP)[0],
                          params, grads, max_entries=120)
    assert max(worst.values()) < TOL, worst


def test_masks_are_a_pure_function_of_seed_step_row_layer_and_site():
    keep = DROP.keep(0, "attn", 4, (6, 16))
    assert np.array_equal(keep, DROP.keep(0, "attn", 4, (6, 16)))
    # a shard's rows 2 and 3 draw what the whole batch's rows 2 and 3 drew
    assert np.array_equal(keep[2:], DROP._replace(row0=2).keep(0, "attn", 2, (6, 16)))
    assert not np.array_equal(keep[0], keep[1])                    # rows differ
    for other in (DROP._replace(step=6), DROP._replace(seed=2)):   # micro-steps, seeds
        assert not np.array_equal(keep, other.keep(0, "attn", 4, (6, 16)))
    assert not np.array_equal(keep, DROP.keep(1, "attn", 4, (6, 16)))  # layers
    assert not np.array_equal(keep, DROP.keep(0, "mlp", 4, (6, 16)))   # sites


@pytest.mark.parametrize("p", [0.05, 0.1, 0.5])
def test_p_is_the_rate_and_kept_units_are_scaled_as_torch_does(p):
    x = np.zeros((64, 32, 32), np.float32)
    mask = Dropout(p, 0, 3).mask(1, "mlp", x)
    assert mask.dtype == np.float32 and mask.shape == x.shape
    assert set(np.unique(mask)) == {0.0, np.float32(1) / np.float32(1 - p)}
    dropped = float((mask == 0).mean())  # 65,536 units: 4 standard errors at most
    assert abs(dropped - p) < 4 * np.sqrt(p * (1 - p) / mask.size)


def test_the_bytes_with_dropout_depend_on_the_shards_not_the_workers():
    params, batch = ATTN.init_params(0), long_batch()
    drop = Dropout(0.2, 3, 11)
    by_workers = {}
    for workers in (1, 2):
        with GradientEngine(ATTN, shards=2, workers=workers) as engine:
            by_workers[workers] = result_bytes(*engine.loss_and_grads(params, batch, drop))
    assert by_workers[1] == by_workers[2]
    with GradientEngine(ATTN, shards=2, workers=1) as engine:
        assert result_bytes(*engine.loss_and_grads(params, batch)) != by_workers[1]
    # one shard draws the very masks the two did: the same loss to rounding
    whole = ATTN.loss_and_grads(params, batch, None, drop)[0]
    assert whole == pytest.approx(np.frombuffer(by_workers[1][:8])[0], rel=1e-6)


def test_forward_only_paths_never_drop():
    model = build_model(ModelConfig(**BASE))
    params, batch = big_params(model), token_batch()
    with GradientEngine(model, shards=2, workers=1) as engine:
        before = engine.batch_losses(params, [batch])
        engine.loss_and_grads(params, batch, DROP)
        assert engine.batch_losses(params, [batch]) == before
    nll, _, _ = model.scores_and_grads(params, batch)  # dynamic evaluation's score
    assert float(nll.sum()) == pytest.approx(before[0][0], rel=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_a_namespace_takes_the_host_masks(target):
    """The array-API path (a GPU's) drops the very units numpy drops: float64 gradients
    equal to rounding."""
    dev = target_device(target)
    if dev.kind == "mps":
        pytest.skip("MPS has no float64")
    model = build_model(ModelConfig(**BASE, mlp="relu2", qk_norm=True))
    params, batch = big_params(model), token_batch()
    want_loss, want = model.loss_and_grads(params, batch, None, DROP)
    got_loss, got = model.loss_and_grads(dev.to_device(params), batch, None, DROP)
    assert got_loss == pytest.approx(want_loss, rel=1e-12)
    for n in want:
        np.testing.assert_allclose(host(dev, got[n]), want[n], rtol=1e-10, atol=1e-12, err_msg=n)
