"""Property tests for the inputs of round three that have a shape: Hugging Face
config.json and index files, params.yaml with aliases and huge values, tokenizer.json.

Each either loads or raises SparkError, within a time bound; nothing else escapes.
Run with `-s` to see the counts.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparktrain.data.tokenizer import ByteTokenizer, parse_tokenizer
from sparktrain.core.errors import SparkError
from sparktrain.export import hf
from sparktrain.model.config import ModelConfig
from sparktrain.core.safeload import load_json
from sparktrain.params import load_params

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=250, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
COUNTS: dict[str, dict[str, int]] = {}
SLOWEST = {"seconds": 0.0}


def _try(kind: str, fn):
    c = COUNTS.setdefault(kind, {"tried": 0, "accepted": 0, "rejected": 0, "escaped": 0})
    c["tried"] += 1
    t0 = time.monotonic()
    try:
        fn()
    except SparkError:
        c["rejected"] += 1
    except BaseException:
        c["escaped"] += 1
        raise
    else:
        c["accepted"] += 1
    finally:
        took = time.monotonic() - t0
        SLOWEST["seconds"] = max(SLOWEST["seconds"], took)
        assert took < 5, f"{kind} input took {took:.1f}s"


huge = st.one_of(st.integers(-10, 10 ** 30), st.integers(10 ** 300, 10 ** 310),
                 st.floats(), st.sampled_from([1e9, 2.9e6, 1e12, -0.0, float("nan"),
                                               float("inf")]))
scalars = st.one_of(st.none(), st.booleans(), huge, st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10)
deep = st.integers(1, 3000).map(lambda n: "[" * n + "]" * n)


def _dumps(value) -> str:
    return json.dumps(value, allow_nan=True)


# ------------------------------------------------------------------ HF config.json

CFG = ModelConfig()
BASE_CONFIG = hf.hf_config(CFG, {"arch": CFG.to_dict()}, {"bos": 253, "eos": 254})
CONFIG_KEYS = sorted(BASE_CONFIG) + ["rope_scaling", "rope_theta", "head_dim", "extra"]


@SETTINGS
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), json_values, max_size=4),
       st.one_of(st.none(), deep))
@example({"rms_norm_eps": 10 ** 310}, None)
@example({"rms_norm_eps": float("nan")}, None)
@example({"rope_theta": 10 ** 310, "num_hidden_layers": 10 ** 9}, None)
def test_any_hf_config_is_a_model_config_or_one_error(changes, nested):
    conf = {**BASE_CONFIG, **changes}
    text = nested if nested is not None else _dumps(conf)

    def read():
        doc = load_json(text, "config.json")
        if not isinstance(doc, dict):
            raise SparkError("not an object")
        cfg = hf.spark_config(doc, "config.json")
        assert cfg.n_layer <= 1024 and math.isfinite(hf.RMS_EPS)
    _try("hf config", read)


def test_the_unchanged_config_is_accepted():
    assert hf.spark_config(load_json(_dumps(BASE_CONFIG), "c"), "c") == CFG


# ------------------------------------------------------------------ HF index

@SETTINGS
@given(st.one_of(json_values, st.dictionaries(st.text(max_size=20), st.one_of(
    st.sampled_from(["../x.safetensors", "/etc/passwd", "a/b", ".", "..", "", "ok.st",
                     "x\x00y", "model-00001.safetensors"]), json_values), max_size=5)),
       st.booleans())
def test_any_index_is_shard_files_in_the_folder_or_one_error(tmp_path_factory, weight_map,
                                                            wrap):
    folder = tmp_path_factory.mktemp("idx")
    doc = {"weight_map": weight_map} if wrap else weight_map
    (folder / hf.INDEX_FILE).write_text(_dumps(doc))

    def read():
        for path in hf._shard_files(folder):
            assert path.parent == folder and path.name not in ("", ".", "..")
    _try("hf index", read)


# ------------------------------------------------------------------ params.yaml

BASE_PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
PARAM_KEYS = ["step.outer", "step.inner", "step.lr", "step.batch_size", "step.shards",
              "step.workers", "scale", "scales", "job", "eval.max_new", "corpus.glob"]


def _alias_text(n: int, fan: int, where: str) -> str:
    """An alias chain: n levels of `fan` references each, used at `where`."""
    lines = ["l0: &l0 [x]"]
    for i in range(1, n + 1):
        refs = ", ".join([f"*l{i - 1}"] * fan)
        lines.append(f"l{i}: &l{i} [{refs}]")
    section, _, key = where.partition(".")
    body = f"{section}:\n  {key}: *l{n}\n" if key else f"{section}: *l{n}\n"
    return "\n".join(lines) + "\n" + body


@SETTINGS
@given(st.dictionaries(st.sampled_from(PARAM_KEYS), json_values, max_size=3),
       st.one_of(st.none(), st.tuples(st.integers(1, 12), st.integers(1, 12),
                                      st.sampled_from(PARAM_KEYS))))
def test_any_params_yaml_loads_or_is_one_error(tmp_path_factory, changes, alias):
    doc = json.loads(json.dumps(BASE_PARAMS))
    for key, value in changes.items():
        section, _, sub = key.partition(".")
        if sub and isinstance(doc.get(section), dict):
            doc[section][sub] = value
        else:
            doc[section] = value
    text = yaml.safe_dump(doc, allow_unicode=True)
    if alias:
        text = _alias_text(*alias) + "\n".join(
            line for line in text.splitlines() if not line.startswith(alias[2].split(".")[0]))
    path = tmp_path_factory.mktemp("params") / "params.yaml"
    path.write_text(text)
    _try("params yaml", lambda: load_params(path))


# ------------------------------------------------------------------ tokenizer.json

BYTE_DOC = json.loads(ByteTokenizer().to_json())
TOKENIZER_KEYS = ["model", "spark_tokenizer", "added_tokens", "normalizer", "pre_tokenizer",
                  "decoder", "version"]


@SETTINGS
@given(st.one_of(
    st.dictionaries(st.sampled_from(TOKENIZER_KEYS), json_values, max_size=4),
    st.fixed_dictionaries({"model": st.fixed_dictionaries({"type": st.just("BPE")}, optional={
        "vocab": json_values, "merges": json_values, "unk_token": json_values})}),
    json_values), st.one_of(st.none(), deep))
def test_any_tokenizer_json_parses_or_is_one_error(doc, nested):
    data = (nested if nested is not None else _dumps(doc)).encode()
    _try("tokenizer json", lambda: parse_tokenizer(data, "tokenizer.json"))


def test_zzz_report_counts():
    """Last in the file: every property ran, nothing escaped, nothing was slow."""
    kinds = ("hf config", "hf index", "params yaml", "tokenizer json")
    if any(k not in COUNTS for k in kinds):
        pytest.skip("run the whole file to see the counts")
    for kind in kinds:
        c = COUNTS[kind]
        assert c["escaped"] == 0 and c["tried"] >= 100, (kind, c)
        print(f"\nproperty {kind}: {c}")
    print(f"slowest input: {SLOWEST['seconds']:.2f}s")
