"""Dynamic evaluation (sparktrain/eval/dynamic.py) holds the four conditions of a fair score:
every held-out token scored exactly once, in one pass, in order; by a full normalised
distribution over the vocabulary; depending only on the stored weights and the tokens before
it; no update reading a token before it was scored. And it learns: on a repeating stream it
codes cheaper than the static score, with every rule."""
from pathlib import Path

import numpy as np
import pytest
import yaml

from sparktrain.core.errors import SparkError
from sparktrain.data.base import bits_per_byte
from sparktrain.data.corpus import sliding_batches
from sparktrain.eval.dynamic import DynamicSettings, dynamic_score, mean_squares
from sparktrain.params import DYNAMIC_RULES as RULES, parse_params
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig

ROOT = Path(__file__).resolve().parents[2]
CFG = ModelConfig(dim=16, n_layer=1, n_head=2, n_kv_head=1, seq_len=8).validate()
BYTES = np.ones(256, dtype=np.int64)  # byte tokens: one byte each
STREAM = np.tile(np.array([3, 9, 4, 1, 5, 9, 2, 6, 5, 3, 5]), 12)  # (132,) a repeating text
STRIDE = 3
RATES = {"rms": 0.002, "sgd": 0.5, "adamw": 0.01}


@pytest.fixture(scope="module")
def model_and_params():
    model = build_model(CFG)
    params = model.init_params(0, b"dynamic")
    ms = mean_squares(model, params, np.tile(STREAM, 3), CFG.seq_len, STRIDE, 0, n_pieces=16)
    return model, params, ms


def token_scores(model, params, ms, stream, settings):
    got = []
    score = dynamic_score(model, params, stream, CFG.seq_len, settings, BYTES, 0, ms,
                          on_piece=got.append)
    return np.concatenate(got), score


@pytest.mark.parametrize("rule", RULES)
def test_each_token_once_in_order_and_learned_from(model_and_params, rule):
    model, params, ms = model_and_params
    before = {n: a.copy() for n, a in params.items()}
    settings = DynamicSettings(rule, RATES[rule], 0.01, STRIDE)
    nats, got = token_scores(model, params, ms, STREAM, settings)
    for n in params:  # the stored weights stay
        assert np.array_equal(params[n], before[n]), n
    # every target once: as many scores as targets, one update a piece
    assert got.targets == len(nats) == len(STREAM) - 1
    assert got.updates == len(list(sliding_batches(STREAM, CFG.seq_len, STRIDE, 1, 0)))
    assert got.nats == pytest.approx(nats.sum(), rel=1e-12)
    # the first piece is scored before any update: the static model's scores
    static = sliding_batches(STREAM, CFG.seq_len, STRIDE, 1, 0)
    first = next(static)
    assert nats[:first.n_counted].sum() == pytest.approx(
        model.batch_loss(params, first)[0], rel=1e-5)
    # it learns the repeating text as it goes: below the static sliding score
    total = sum(model.batch_loss(params, b)[0] for b in
                sliding_batches(STREAM, CFG.seq_len, STRIDE, 1, 0))
    assert got.bpb < bits_per_byte(total, len(STREAM) - 1) - 0.2


@pytest.mark.parametrize("rule", RULES)
def test_scores_up_to_t_depend_only_on_tokens_up_to_t(model_and_params, rule):
    """Change every token after position t: each score of a target at or before t stays
    byte-identical (no update read a later token; nothing looked ahead)."""
    model, params, ms = model_and_params
    settings = DynamicSettings(rule, RATES[rule], 0.01, STRIDE)
    base, _ = token_scores(model, params, ms, STREAM, settings)
    again, _ = token_scores(model, params, ms, STREAM, settings)
    assert base.tobytes() == again.tobytes()  # two runs, the same bytes
    rng = np.random.default_rng(1)
    for t in (5, 17, 40, 41, 77, 120):  # target k is token k + 1: targets 0 .. t - 1 kept
        changed = STREAM.copy()
        changed[t + 1:] = rng.integers(0, 12, size=len(STREAM) - t - 1)
        assert not np.array_equal(changed[t + 1:], STREAM[t + 1:])
        nats, _ = token_scores(model, params, ms, changed, settings)
        assert nats[:t].tobytes() == base[:t].tobytes(), t
        assert nats[t:].tobytes() != base[t:].tobytes(), t


def test_a_full_normalised_distribution(model_and_params):
    """The score of target t is -log p(token), p a distribution over the whole vocabulary:
    the probabilities that every possible next token would get sum to 1."""
    model, params, ms = model_and_params
    settings = DynamicSettings("rms", RATES["rms"], 0.01, STRIDE)
    t = 23  # a target inside the stream, after several updates
    probs = []
    for v in range(CFG.vocab):
        stream = STREAM[:t + 2].copy()
        stream[t + 1] = v
        nats, _ = token_scores(model, params, ms, stream, settings)
        probs.append(np.exp(-nats[t]))
    assert sum(probs) == pytest.approx(1.0, abs=1e-4)


def test_refusals(model_and_params):
    model, params, ms = model_and_params
    with pytest.raises(SparkError, match="stride"):
        dynamic_score(model, params, STREAM, 8, DynamicSettings("sgd", 0.1, 0, 9), BYTES, 0)
    with pytest.raises(SparkError, match="rule"):
        dynamic_score(model, params, STREAM, 8, DynamicSettings("lion", 0.1, 0, 4), BYTES, 0)
    with pytest.raises(SparkError, match="not finite"):
        dynamic_score(model, params, STREAM, 8, DynamicSettings("sgd", 1e30, 0, 4), BYTES, 0)


@pytest.mark.parametrize("change, message", [
    ({"dynamic_stride": 65}, "eval.dynamic_stride 65 is above seq_len 64"),
    ({"dynamic_lr": -0.1}, "dynamic_lr"),
    ({"dynamic_lr": 0.001, "dynamic_rule": "lion"}, "dynamic_rule"),
    ({"dynamic_lr": 0.001, "dynamic_decay": 1.5}, "dynamic_decay"),
])
def test_the_params_check_refuses_bad_settings_before_training(change, message):
    """Every dynamic setting is checked when params are read, before a first write."""
    recipe = yaml.safe_load((ROOT / "data/programs/coder-recipes.yaml").read_text())["tiny"]
    recipe["eval"] = {**recipe.get("eval", {}), **change}
    with pytest.raises(SparkError, match=message):
        parse_params(recipe)


def test_a_params_file_of_the_adaptive_score_is_told_what_replaced_it():
    recipe = yaml.safe_load((ROOT / "data/programs/coder-recipes.yaml").read_text())["tiny"]
    for key, instead in (("adapt_lr", "eval.dynamic_lr"), ("adapt_batch", "dynamic_stride")):
        recipe["eval"] = {key: 0.001 if key == "adapt_lr" else 16}
        with pytest.raises(SparkError, match=f"eval.{key} is no longer read; use .*{instead}"):
            parse_params(recipe)
