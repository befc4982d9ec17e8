"""The score-first adaptive score (sparktrain/eval/adaptive.py): every target scored once,
each batch before the step that reads it; the stored weights never change; at a vanishing
rate it is the static score, and on a repetitive stream adapting codes it cheaper."""
import numpy as np
import pytest

from sparktrain.data.base import bits_per_byte
from sparktrain.data.corpus import stream_batches
from sparktrain.eval.adaptive import adaptive_score
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig

CFG = ModelConfig(dim=16, n_layer=1, n_head=2, n_kv_head=1, seq_len=8).validate()
BYTES = np.ones(256, dtype=np.int64)  # byte tokens: one byte each
STREAM = np.tile(np.array([3, 9, 4, 1, 5, 9, 2, 6, 5, 3, 5]), 12)  # (132,) a repeating text


def static(model, params):
    batches = list(stream_batches(STREAM, CFG.seq_len, 4, 0))
    total = sum(model.batch_loss(params, b)[0] for b in batches)
    return bits_per_byte(total, len(STREAM) - 1), sum(b.n_counted for b in batches)


def test_scores_every_target_once_and_leaves_the_weights():
    model = build_model(CFG)
    params = model.init_params(0, b"adapt")
    before = {n: a.copy() for n, a in params.items()}
    got = adaptive_score(model, params, STREAM, CFG.seq_len, 4, 0.01, BYTES, pad=0)
    for n in params:
        assert np.array_equal(params[n], before[n]), n
    bpb, targets = static(model, params)
    assert got.targets == targets == len(STREAM) - 1
    assert got.steps == -(-len(range(0, len(STREAM) - 1, CFG.seq_len)) // 4)
    # the first batch is scored before any step: a run of one batch is the static score
    one = adaptive_score(model, params, STREAM[:33], CFG.seq_len, 4, 0.01, BYTES, pad=0)
    first = sum(model.batch_loss(params, b)[0] for b in stream_batches(STREAM[:33], 8, 4, 0))
    assert one.nats == pytest.approx(first, rel=1e-6)
    # a vanishing rate is the static score; a real one learns the repeating text as it goes
    assert adaptive_score(model, params, STREAM, 8, 4, 1e-9, BYTES, 0).bpb == pytest.approx(bpb,
                                                                                           rel=1e-5)
    assert got.bpb < bpb - 0.05 and got.seconds > 0

