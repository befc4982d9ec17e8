"""Data parallelism over fixed shards: the bytes depend on the shard count only,
1 shard is the model's own loss_and_grads, and the shards add up to the batch."""
import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.model.base import PoolBatch, TokenBatch
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig
from sparktrain.model.parallel import GradientEngine, add_in_order, shard_ranges, slice_rows
from sparktrain.runtime import default_workers

ATTN = build_model(ModelConfig(dim=16, n_layer=2, n_head=4, n_kv_head=2, seq_len=16))
POOL = build_model(ModelConfig(dim=16, n_layer=2, n_head=4, n_kv_head=2, seq_len=16,
                               train_attn=False))


def token_batch(B=7, T=12, seed=0):
    """Rows of different lengths, prompt targets and padding masked out."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, 256, (B, T))
    targets = rng.integers(0, 256, (B, T))
    mask = np.zeros((B, T), np.float32)
    for b in range(B):
        n = int(rng.integers(3, T + 1))
        mask[b, 1 + b % 2:n] = 1.0
    return TokenBatch(inputs, targets, mask)


def pool_batch(B=5, T=9, seed=0):
    rng = np.random.default_rng(seed)
    mask = (np.arange(T)[None, :] < rng.integers(2, T + 1, B)[:, None]).astype(np.float32)
    return PoolBatch(rng.integers(0, 256, (B, T)), mask, rng.integers(0, 256, B))


def result_bytes(loss, grads) -> bytes:
    return np.float64(loss).tobytes() + b"".join(g.tobytes() for g in grads.values())


def test_shard_ranges_cover_every_row_once_in_order():
    assert shard_ranges(7, 3) == [(0, 2), (2, 4), (4, 7)]
    assert shard_ranges(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert shard_ranges(2, 4) == [(0, 1), (1, 2)]  # empty shards dropped
    assert shard_ranges(5, 1) == [(0, 5)]


def test_slice_rows_cuts_every_field():
    batch = token_batch()
    part = slice_rows(batch, 2, 5)
    assert isinstance(part, TokenBatch)
    np.testing.assert_array_equal(part.inputs, batch.inputs[2:5])
    np.testing.assert_array_equal(part.mask, batch.mask[2:5])
    pool = slice_rows(pool_batch(), 1, 3)
    assert pool.target.shape == (2,) and pool.context.shape[0] == 2


def test_one_shard_is_the_models_own_computation():
    params = ATTN.init_params(0, b"t")
    batch = token_batch()
    with GradientEngine(ATTN, shards=1, workers=2) as engine:
        got = engine.loss_and_grads(params, batch)
    assert result_bytes(*got) == result_bytes(*ATTN.loss_and_grads(params, batch))


@pytest.mark.parametrize("model, batch", [(ATTN, token_batch()), (POOL, pool_batch())],
                         ids=["attention", "meanpool"])
def test_shards_add_up_to_the_whole_batch(model, batch):
    params = model.init_params(0, b"t", dtype=np.float64)
    loss, grads = model.loss_and_grads(params, batch)
    with GradientEngine(model, shards=3, workers=1) as engine:
        s_loss, s_grads = engine.loss_and_grads(params, batch)
    assert s_loss == pytest.approx(loss, rel=1e-12)
    for name in grads:
        np.testing.assert_allclose(s_grads[name], grads[name], rtol=1e-9, atol=1e-14,
                                   err_msg=name)
    assert list(s_grads) == list(params)


def test_bytes_depend_on_the_shard_count_not_on_the_workers():
    params = ATTN.init_params(3, b"t")
    batch = token_batch(B=9)
    by_workers = {}
    for workers in (1, 2, 3):
        with GradientEngine(ATTN, shards=3, workers=workers) as engine:
            # twice: the second call reuses the running workers and the shared block
            engine.loss_and_grads(params, batch)
            by_workers[workers] = result_bytes(*engine.loss_and_grads(params, batch))
    assert by_workers[1] == by_workers[2] == by_workers[3]
    with GradientEngine(ATTN, shards=2, workers=1) as engine:
        assert result_bytes(*engine.loss_and_grads(params, batch)) != by_workers[1]


def test_workers_see_the_params_of_each_call():
    params = ATTN.init_params(0, b"t")
    batch = token_batch()
    with GradientEngine(ATTN, shards=2, workers=2) as engine:
        first = engine.loss_and_grads(params, batch)
        for p in params.values():
            p *= np.float32(1.5)
        second = engine.loss_and_grads(params, batch)
    with GradientEngine(ATTN, shards=2, workers=1) as serial:
        expected = serial.loss_and_grads(params, batch)
    assert result_bytes(*second) == result_bytes(*expected)
    assert result_bytes(*second) != result_bytes(*first)


def test_more_shards_than_rows_and_more_workers_than_shards():
    params = ATTN.init_params(0, b"t")
    batch = token_batch(B=2)
    with GradientEngine(ATTN, shards=5, workers=8) as engine:
        assert engine.workers == 5
        loss, grads = engine.loss_and_grads(params, batch)
    with GradientEngine(ATTN, shards=2, workers=1) as engine:
        assert result_bytes(loss, grads) == result_bytes(*engine.loss_and_grads(params, batch))


def test_add_in_order_keeps_the_order():
    parts = [{"w": np.array([1e8], np.float32)}, {"w": np.array([1.0], np.float32)},
             {"w": np.array([-1e8], np.float32)}]
    assert add_in_order(parts)["w"][0] == np.float32(0.0)       # (1e8 + 1) - 1e8 in float32
    assert add_in_order(parts[::-1])["w"][0] == np.float32(0.0)
    assert add_in_order([parts[0], parts[2], parts[1]])["w"][0] == np.float32(1.0)
    assert parts[0]["w"][0] == np.float32(1e8), "the inputs are not changed"


def test_workers_default_and_env(monkeypatch):
    monkeypatch.setenv("SPARK_WORKERS", "3")
    assert default_workers() == 3
    monkeypatch.delenv("SPARK_WORKERS")
    assert default_workers() >= 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("SPARK_WORKERS", bad)
        with pytest.raises(SparkError, match="SPARK_WORKERS must be a positive integer"):
            default_workers()


def test_close_stops_the_workers():
    params = ATTN.init_params(0, b"t")
    engine = GradientEngine(ATTN, shards=2, workers=2)
    engine.loss_and_grads(params, token_batch())
    procs = list(engine._procs)
    assert procs and all(p.is_alive() for p in procs)
    engine.close()
    assert not any(p.is_alive() for p in procs)
    engine.close()  # twice is fine


def test_batch_losses_are_the_models_in_order_with_any_worker_count():
    params = ATTN.init_params(0, b"t")
    batches = [token_batch(B=3, seed=s) for s in range(5)]
    expected = [ATTN.batch_loss(params, b) for b in batches]
    for workers in (1, 2, 3):
        with GradientEngine(ATTN, shards=3, workers=workers) as engine:
            assert engine.batch_losses(params, batches) == expected
            assert engine.batch_losses(params, iter(batches * 3)) == expected * 3
    with GradientEngine(ATTN, shards=2, workers=2) as engine:  # then a gradient step
        engine.batch_losses(params, batches)
        got = engine.loss_and_grads(params, batches[0])
    with GradientEngine(ATTN, shards=2, workers=1) as engine:
        assert result_bytes(*got) == result_bytes(*engine.loss_and_grads(params, batches[0]))
