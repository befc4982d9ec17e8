"""evaluate(): numbers from the training forward, batched, deterministic."""
import math

import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.data.pairs_score import evaluate
from sparktrain.model.base import PoolBatch, TokenBatch
from sparktrain.model.build import build_model
from sparktrain.data.pairs import Pair, encode_pair

from evalkit import SMALL, SMALL_POOL, oracle  # noqa: F401 (fixture)

PAIRS = [
    Pair("Say exactly: cab", "cab", 1),
    Pair("Reverse: dog", "god", 2),
    Pair("hello there, how are you", "fine", 3),
    Pair("Say exactly: a", "a", 4, family="mine"),
    Pair("x", "a much longer completion", 5),
]


def naive_row(params, cfg, pair):
    """One row alone, no padding: (sum CE, counted, right, right completion bytes)."""
    e = encode_pair(pair, cfg.seq_len)
    logits = build_model(cfg).forward_logits(params, e.tokens[None, :-1])[0]  # (T, V)
    logits = logits.astype(np.float64)
    targets = e.tokens[1:]
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    ce = right = 0.0
    for t in np.flatnonzero(e.mask):
        ce -= logp[t, targets[t]]
        right += float(np.argmax(logits[t]) == targets[t])
    return ce, int(e.mask.sum()), right


def test_matches_naive_per_row_reference_and_batch_loss():
    params = build_model(SMALL).init_params(seed=1)
    m = evaluate(params, SMALL, PAIRS, batch_size=2, n_samples=0)
    rows = [naive_row(params, SMALL, p) for p in PAIRS]
    counted = sum(r[1] for r in rows)
    assert m["n"] == len(PAIRS) and m["n_counted"] == counted
    assert m["loss"] == pytest.approx(sum(r[0] for r in rows) / counted, rel=1e-6)
    assert m["perplexity"] == pytest.approx(math.exp(m["loss"]), rel=1e-6)
    assert m["next_token_accuracy"] == pytest.approx(sum(r[2] for r in rows) / counted, abs=1e-9)
    batch = TokenBatch.from_rows([encode_pair(p, SMALL.seq_len) for p in PAIRS])
    s, n = build_model(SMALL).batch_loss(params, batch)
    assert n == counted and m["loss"] == pytest.approx(s / n, rel=1e-6)
    assert 4.5 < m["loss"] < 6.5  # about ln 256 at init


def test_batch_size_does_not_change_metrics_and_is_deterministic():
    params = build_model(SMALL).init_params(seed=2)
    a = evaluate(params, SMALL, PAIRS, batch_size=1)
    b = evaluate(params, SMALL, PAIRS, batch_size=64)
    assert evaluate(params, SMALL, PAIRS, batch_size=1) == a
    for key in ("loss", "next_token_accuracy", "exact_match", "n_counted"):
        assert a[key] == pytest.approx(b[key], rel=1e-5)
    assert [s["generated"] for s in a["samples"]] == [s["generated"] for s in b["samples"]]


def test_families_samples_and_copy_recall_fields():
    params = build_model(SMALL).init_params(seed=3)
    m = evaluate(params, SMALL, PAIRS, n_samples=3)
    assert set(m["families"]) == {"copy", "reverse", "chat", "mine"}
    assert m["families"]["copy"]["n"] == 1 and m["families"]["chat"]["n"] == 2
    assert sum(f["n_counted"] for f in m["families"].values()) == m["n_counted"]
    assert m["n_copy_probes"] == 2  # the "mine" row is still a copy probe by its prompt
    assert 0.0 <= m["copy_recall"] <= 1.0
    assert [s["prompt"] for s in m["samples"]] == [PAIRS[0].prompt, PAIRS[1].prompt,
                                                   PAIRS[3].prompt]
    assert all(set(s) == {"prompt", "expected", "generated", "family"} for s in m["samples"])
    none = evaluate(params, SMALL, [Pair("hi", "yo", 1)], n_samples=0)
    assert none["copy_recall"] is None and none["n_copy_probes"] == 0 and none["samples"] == []


def test_oracle_model_scores_perfectly(oracle):
    """A model that copies perfectly gets exact match 1 and recall 1: the metrics
    line up targets, positions and generation correctly."""
    pairs = [Pair("Say exactly: " + w, w, i) for i, w in enumerate(["ab", "hello", "q", "xyzzy"])]
    m = evaluate({}, SMALL, pairs, batch_size=3)
    assert m["exact_match"] == 1.0
    assert m["copy_recall"] == 1.0
    assert m["next_token_accuracy"] == 1.0
    assert m["loss"] < 1e-6
    assert [s["generated"] for s in m["samples"]] == [s["expected"] for s in m["samples"]]
    wrong = evaluate({}, SMALL, [Pair("Say exactly: ab", "ba", 1)])
    assert wrong["exact_match"] == 0.0 and wrong["copy_recall"] == 0.0
    # the oracle emits EOS after "ab", so the EOS target is still predicted right
    assert wrong["next_token_accuracy"] == pytest.approx(1 / 3)


def test_generation_cap_limits_exact_match(oracle):
    pairs = [Pair("Say exactly: hello", "hello", 1)]
    assert evaluate({}, SMALL, pairs, max_new=3)["exact_match"] == 0.0
    assert evaluate({}, SMALL, pairs, max_new=3)["samples"][0]["generated"] == "hel"
    assert evaluate({}, SMALL, pairs, max_new=6)["exact_match"] == 1.0


def test_pool_mode_single_target():
    params = build_model(SMALL_POOL).init_params(seed=4)
    m = evaluate(params, SMALL_POOL, PAIRS, batch_size=2)
    assert m["mode"] == "pool" and m["n_counted"] == len(PAIRS)
    batch = PoolBatch.from_rows([encode_pair(p, 32) for p in PAIRS])
    s, n = build_model(SMALL_POOL).batch_loss(params, batch)
    assert m["loss"] == pytest.approx(s / n, rel=1e-6)
    assert all(len(x["generated"].encode("utf-8", "surrogatepass")) <= 3 for x in m["samples"])
    # a one-byte completion can be matched by the one generated byte
    assert m["families"]["mine"]["exact_match"] in (0.0, 1.0)


def test_errors():
    params = build_model(SMALL).init_params(seed=0)
    with pytest.raises(SparkError, match="no rows"):
        evaluate(params, SMALL, [])
    with pytest.raises(SparkError, match="batch_size"):
        evaluate(params, SMALL, PAIRS, batch_size=0)
    broken = {k: np.full_like(v, np.nan) for k, v in params.items()}
    with pytest.raises(SparkError, match="non-finite"):
        evaluate(broken, SMALL, PAIRS)


def test_a_few_sgd_steps_lower_heldout_loss():
    words = [a + b + c for a in "abcd" for b in "abcd" for c in "abcd"]
    train = [Pair("Say exactly: " + w, w, i) for i, w in enumerate(words[:-12])]
    held = [Pair("Say exactly: " + w, w, i) for i, w in enumerate(words[-12:])]
    assert not {p.prompt for p in train} & {p.prompt for p in held}
    params = build_model(SMALL).init_params(seed=0)
    before = evaluate(params, SMALL, held, n_samples=0)
    batch = TokenBatch.from_rows([encode_pair(p, SMALL.seq_len) for p in train])
    for _ in range(10):
        _, grads = build_model(SMALL).loss_and_grads(params, batch)
        params = {k: v - 1.0 * grads[k] for k, v in params.items()}
    after = evaluate(params, SMALL, held, n_samples=0)
    assert after["loss"] < before["loss"] - 1.0
    assert after["next_token_accuracy"] > before["next_token_accuracy"]
