"""Property tests: datasets, params.yaml, weights headers and bytecode either load
or raise SparkError; no other exception ever escapes.

Run with `-s` to see the counts (inputs tried, accepted, rejected, escaped).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparktrain.bc.compiler import compile_source
from sparktrain.bc.codec import check_executable, decode, dump_json, dump_text
from sparktrain.core.errors import SparkError
from sparktrain.model.weights import load_model
from sparktrain.params import load_params
from sparktrain.data.pairs import encode_pair, parse_pairs

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
COUNTS: dict[str, dict[str, int]] = {}


def _try(kind: str, fn):
    """Run fn; count accepted / rejected (SparkError); let anything else fail the test."""
    c = COUNTS.setdefault(kind, {"tried": 0, "accepted": 0, "rejected": 0, "escaped": 0})
    c["tried"] += 1
    try:
        fn()
    except SparkError:
        c["rejected"] += 1
        return
    except BaseException:
        c["escaped"] += 1
        raise
    c["accepted"] += 1


# ------------------------------------------------------------------ datasets

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                    st.text(alphabet=st.characters(codec=None), max_size=20))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
row_like = st.fixed_dictionaries({}, optional={
    "prompt": json_values, "completion": json_values, "family": json_values,
    "messages": st.lists(st.fixed_dictionaries({}, optional={"role": st.sampled_from(
        ["user", "assistant", "tool", 3]), "content": json_values}), max_size=4)})
lines = st.one_of(row_like.map(lambda r: json.dumps(r)), json_values.map(json.dumps),
                  st.text(max_size=40), st.sampled_from([
                      '{"prompt": "\\ud800", "completion": "x"}', "[" * 5000,
                      '{"prompt": "a", "completion": "b", "n": ' + "7" * 5000 + "}"]))


good_rows = st.builds(lambda p, c: json.dumps({"prompt": p, "completion": c}),
                      st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))


@SETTINGS
@given(st.lists(good_rows, min_size=1, max_size=5), st.one_of(st.none(), lines),
       st.integers(0, 5), st.one_of(st.just(b""), st.binary(max_size=30)))
def test_any_dataset_loads_or_is_one_spark_error(rows, odd, at, junk):
    rows = list(rows)
    if odd is not None:
        rows.insert(at % (len(rows) + 1), odd)
    data = ("\n".join(rows)).encode("utf-8", "surrogatepass") + junk

    def load():
        for pair in parse_pairs(data, "d.jsonl"):
            encode_pair(pair, 16)
    _try("dataset", load)


# ------------------------------------------------------------------ params.yaml

knob = st.one_of(st.integers(-5, 10**30), st.floats(), st.booleans(), st.none(),
                 st.text(max_size=6), st.lists(st.integers(), max_size=2))
step_section = st.dictionaries(st.sampled_from(["outer", "inner", "step", "lr", "batch_size",
                                                "seed", "clip", "momentum", "train_attn",
                                                "train_embed", "oter"]), knob, max_size=5)
params_docs = st.fixed_dictionaries(
    {"job": st.one_of(st.just("job-1"), knob), "program": st.one_of(st.just("p.sparkbc"), knob),
     "scale": st.one_of(st.sampled_from(["tiny", "large", "huge"]), knob)},
    optional={"step": st.one_of(step_section, knob),
              "scales": st.dictionaries(st.sampled_from(["tiny", "x"]), st.one_of(
                  st.dictionaries(st.sampled_from(["dim", "n_layer", "n_head", "n_kv_head",
                                                   "seq_len", "vocab"]), knob, max_size=6),
                  knob), max_size=2),
              "eval": st.dictionaries(st.sampled_from(["data", "batch_size", "max_new", "x"]),
                                      knob, max_size=3)})


BASE_PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


def _mutated_params(changes: dict) -> str:
    doc = json.loads(json.dumps(BASE_PARAMS))
    for key, value in changes.items():
        section, _, sub = key.partition(".")
        if sub and isinstance(doc.get(section), dict):
            doc[section][sub] = value
        else:
            doc[section] = value
    return yaml.safe_dump(doc, allow_unicode=True)


mutations = st.dictionaries(st.sampled_from(["step.lr", "step.outer", "step.clip", "step.seed",
                                             "step.train_attn", "eval.max_new", "scale", "job"]),
                            knob, max_size=2)


@SETTINGS
@given(st.one_of(mutations.map(_mutated_params),
                 params_docs.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
                 st.text(max_size=60)))
def test_any_params_yaml_loads_or_is_one_spark_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("p") / "params.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _try("params", lambda: load_params(path))


# ------------------------------------------------------------------ weights headers

def _weights_file(header: bytes, body: bytes, declared: int | None = None) -> bytes:
    n = len(header) if declared is None else declared
    return struct.pack("<Q", n) + header + body


tensor_entry = st.fixed_dictionaries({}, optional={
    "dtype": st.sampled_from(["F32", "F64", "I64", "BOOL", "F16", "X"]),
    "shape": st.lists(st.integers(-2, 300), max_size=3),
    "data_offsets": st.lists(st.integers(-1, 2000), max_size=3)})
spark_meta = st.one_of(
    st.just({"arch": {"dim": 4, "n_layer": 1, "n_head": 2, "n_kv_head": 1, "seq_len": 8,
                      "vocab": 256, "train_attn": False}}),
    st.dictionaries(st.sampled_from(["arch", "step_n"]), json_values, max_size=2), json_values)
headers = st.builds(
    lambda tensors, meta, raw_meta: {**tensors, "__metadata__": {
        "spark": raw_meta if raw_meta is not None else json.dumps(meta)}},
    st.dictionaries(st.sampled_from(["spark.embed.weight", "spark.lm_head.weight", "x"]),
                    tensor_entry, max_size=3),
    spark_meta, st.one_of(st.none(), st.text(max_size=10)))


POOL_ARCH = {"dim": 4, "n_layer": 1, "n_head": 2, "n_kv_head": 1, "seq_len": 8, "vocab": 256,
             "train_attn": False}


def _valid_weights(arch_changes: dict, dtype: str, value: float) -> bytes:
    import numpy as np
    from safetensors.numpy import save

    arch = {**POOL_ARCH, **arch_changes}
    with np.errstate(all="ignore"):   # nan/inf cast to int on purpose
        t = {n: np.full((256, 4), value).astype(dtype) for n in ("spark.embed.weight",
                                                                  "spark.lm_head.weight")}
    return save(t, metadata={"spark": json.dumps({"arch": arch, "step_n": 1})})


valid_ish = st.builds(_valid_weights,
                      st.dictionaries(st.sampled_from(list(POOL_ARCH)), knob, max_size=1),
                      st.sampled_from(["float32", "float32", "float64", "int64", "bool"]),
                      st.one_of(st.floats(-1, 1), st.floats()))


@SETTINGS
@given(st.one_of(valid_ish, st.builds(
    lambda h, b, d: _weights_file(json.dumps(h).encode(), b, d), headers, st.binary(max_size=64),
    st.one_of(st.none(), st.integers(0, 2**64 - 1)))))
def test_any_weights_header_loads_or_is_one_spark_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("w") / "w.safetensors"
    path.write_bytes(data)
    _try("weights", lambda: load_model(path))


# ------------------------------------------------------------------ bytecode

SEEDS = [compile_source((ROOT / p).read_text()) for p in
         ("tests/vectors/spark-train-step.spark", "data/programs/train-step.spark")]


@SETTINGS
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                        max_size=4), st.integers(0, 10**6))
def test_any_bytecode_decodes_dumps_or_is_one_spark_error(seed, flips, cut):
    data = bytearray(seed)
    for at, value in flips:
        data[at % len(data)] = value
    data = bytes(data[:max(cut % (len(data) + 8), 1)] if cut % 3 == 0 else data)

    def use():
        program = decode(data)
        dump_json(program)
        dump_text(program)
        check_executable(program)
    _try("bytecode", use)


def test_zzz_report_counts():
    """Last in the file: every property ran and nothing escaped."""
    for kind in ("dataset", "params", "weights", "bytecode"):
        c = COUNTS.get(kind)
        if c is None:
            pytest.skip("run the whole file to see the counts")
        assert c["escaped"] == 0 and c["tried"] >= 100, (kind, c)
        print(f"\nproperty {kind}: {c}")
