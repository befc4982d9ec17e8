"""One weights check for every reader (eval, generate, train --base)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save

from relkit import FAST, TRAIN, trained  # noqa: F401  (fixture)
from sparkhelp import assert_one_line_error, run_spark
from sparktrain.model.weights import load_weights


def _readers(weights):
    return [["eval", "--weights", weights, "--data", "data/eval/tiny_heldout.jsonl"],
            ["generate", "--weights", weights, "hi"],
            TRAIN + ["--out", "out/w", "--base", weights] + FAST]


def _variant(src, dest, tensor_fn=None, meta_fn=None):
    from safetensors.numpy import load

    data = src.read_bytes()
    tensors = load(data)
    n = int.from_bytes(data[:8], "little")
    meta = json.loads(json.loads(data[8:8 + n])["__metadata__"]["spark"])
    if tensor_fn:
        tensors = tensor_fn(tensors)
    if meta_fn:
        meta = meta_fn(meta)
    dest.write_bytes(save(tensors, metadata={"spark": json.dumps(meta)}))
    return dest


def _set(name, value):
    def f(t):
        t = dict(t)
        t[name] = value(t[name])
        return t
    return f


def _arch(**change):
    def f(m):
        m = dict(m)
        m["arch"] = {k: v for k, v in {**m["arch"], **change}.items() if v is not None}
        return m
    return f


EMBED = "spark.embed.weight"


@pytest.mark.parametrize("tensor_fn, meta_fn, needle", [
    (_set(EMBED, lambda a: np.full_like(a, np.nan)), None, "NaN or infinite"),
    (_set(EMBED, lambda a: np.where(a > 0, np.inf, a)), None, "NaN or infinite"),
    (_set(EMBED, lambda a: a.astype(np.int64)), None, "is int64; Spark weights are F32"),
    (_set(EMBED, lambda a: a > 0), None, "is bool"),
    (_set(EMBED, lambda a: a.astype(np.float64)), None, "is float64"),
    (None, _arch(dim=None), "lacks dim"),
    (None, _arch(train_attn="yes"), "train_attn must be true or false"),
    (None, _arch(dim="32"), "dim must be a positive integer"),
    (None, lambda m: [m], "must be a JSON object, got list"),
])
def test_every_reader_refuses_bad_weights(trained, tmp_path, tensor_fn, meta_fn, needle):
    project, weights = trained
    bad = _variant(weights, tmp_path / "bad.safetensors", tensor_fn, meta_fn)
    for argv in _readers(bad):
        rc, out, err = run_spark(argv, cwd=project)
        assert_one_line_error(rc, err, needle)
        assert out == ""


def test_good_weights_load_unchanged(trained):
    _, weights = trained
    params, meta = load_weights(weights)
    assert all(a.dtype == np.float32 for a in params.values())
    assert isinstance(meta, dict) and meta["trained"] is True
