"""Round four, reads: every JSON/YAML a command reads goes through the one bounded
loader (sparktrain/core/safeload.py, docs/outputs.md "The bounded loader").

Two halves: the source holds no other JSON/YAML parse call, and every reader,
fed fuzzed nesting, size, digits, duplicate keys and value counts, returns or
says one line (SparkError), fast, never another exception.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save

from sparkhelp import ROOT, assert_one_line_error, run_spark
from sparktrain.core.errors import SparkError
from sparktrain.core.safeload import MAX_ITEMS, MAX_YAML_ITEMS, load_json, load_yaml

PARSERS = re.compile(r"\b(json\.loads?|yaml\.(safe_)?load|yaml\.load_all)\(")


def test_no_reader_parses_json_or_yaml_outside_the_loader():
    found = []
    for folder in ("sparktrain", "stages", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "safeload.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if PARSERS.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "parse calls outside sparktrain/core/safeload.py:\n" + "\n".join(found)


# ------------------------------------------------------------------ hostile texts

def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _digits(n: int) -> str:
    return '{"vocab_size": ' + "7" * n + "}"


def _duplicate(key: str) -> str:
    return json.dumps({"a": 1})[:-1] + f', "{key}": 1,\n "{key}": 2}}'


def _many(n: int) -> str:
    return '{"loss_curve": [' + ",".join(["0"] * n) + "]}"


HOSTILE = st.one_of(
    st.integers(65, 200_000).map(_nested),
    st.integers(4_301, 20_000).map(_digits),
    st.sampled_from(["lr", "step", "model", "a", "é"]).map(_duplicate),
    st.integers(MAX_ITEMS - 2, MAX_ITEMS + 50_000).map(_many),
    st.integers(MAX_YAML_ITEMS - 2, MAX_YAML_ITEMS + 2).map(_many),  # YAML's bound, either side
    st.sampled_from(['{"x": NaN}', '{"x": -Infinity}', "a: &x [1]\nb: *x\n", "{", "\xff"]),
)


def _readers(tmp: Path):
    """(name, reader of a text) for every kind of JSON/YAML file a command reads."""
    from sparktrain.data.pairs import read_pairs
    from sparktrain.data.corpus import read_prepared
    from sparktrain.data.source import TextSource
    from sparktrain.data.tokenizer import parse_tokenizer
    from sparktrain.export.hf import _json_object
    from sparktrain.model.weights import load_weights
    from sparktrain.params import load_params
    from sparktrain.repro.dvclock import read_lock
    from sparktrain.sweep.grid import lock_outputs
    from sparktrain.train.outputs import read_job_json

    def at(name: str, text: str) -> Path:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        return path

    def weights(text: str):
        data = save({"x": np.zeros(2, np.float32)}, metadata={"spark": text})
        return load_weights(_raw(tmp / "w.safetensors", data))

    return {
        "params.yaml": lambda t: load_params(at("params.yaml", t)),
        "dvc.lock": lambda t: read_lock(at("dvc.lock", t)),
        "tokenizer.json": lambda t: parse_tokenizer(t.encode("utf-8", "surrogatepass"), "tok"),
        "config.json": lambda t: _json_object(at("hf/config.json", t), "config.json"),
        "job file": lambda t: read_job_json(at("job/checkpoint.json", t)),
        "files.json": lambda t: read_prepared(at("corpus/files.json", t).parent),
        "pairs row": lambda t: read_pairs(at("pairs.jsonl", t.replace("\n", " ") + "\n")),
        "text row": lambda t: TextSource(str(at("rows.jsonl", t.replace("\n", " ") + "\n")),
                                         0.1).read(),
        "weights metadata": weights,
        "sweep lock": lock_outputs,
        "yaml": lambda t: load_yaml(t, "x.yaml"),
        "json": lambda t: load_json(t, "x.json"),
    }


def _raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


STATS = {"inputs": 0, "escaped": 0, "slowest": 0.0}
HANG_S = 30  # a shared 2-core machine: a bound on a hang, not a benchmark


# generation only: shrinking a slow case would take longer than finding it
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.generate])
@given(text=HOSTILE)
def test_every_reader_bounds_hostile_json_and_yaml(tmp_path_factory, text):
    tmp = tmp_path_factory.mktemp("fuzz")
    for name, read in _readers(tmp).items():
        STATS["inputs"] += 1
        t0 = time.perf_counter()
        try:
            read(text)
        except SparkError as err:
            assert "\n" not in str(err), f"{name}: a multi-line error"
        except Exception as err:  # noqa: BLE001 (the point: nothing else escapes)
            STATS["escaped"] += 1
            raise AssertionError(f"{name}: {type(err).__name__}: {str(err)[:200]}") from None
        spent = time.perf_counter() - t0
        STATS["slowest"] = max(STATS["slowest"], spent)
        assert spent < HANG_S, f"{name} took {spent:.1f}s on a hostile text"


def test_duplicate_keys_name_the_key_and_both_lines():
    with pytest.raises(SparkError, match=r"key 'lr' is given twice \(lines 2 and 3\)"):
        load_yaml("step:\n  lr: 0.1\n  lr: 0.5\n", "params.yaml")
    with pytest.raises(SparkError, match=r"key 'lr' is given twice \(lines 2 and 3\)"):
        load_json('{\n"lr": 1,\n"lr": 2}', "x.json")


def test_params_yaml_with_a_key_twice_is_refused_by_every_command(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("step:\n", "step:\n  lr: 0.5\n", 1)
    (tmp_path / "params.yaml").write_text(text)
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl", "--out",
                            tmp_path / "out/j", "--params", tmp_path / "params.yaml",
                            "--outer", "1", "--inner", "1"], cwd=tmp_path)
    assert_one_line_error(rc, err, "'lr' is given twice")
    assert not (tmp_path / "out").exists()


def test_a_three_million_point_curve_is_refused_fast_and_small():
    from sparktrain.eval.compare import CHECKPOINT_ITEMS

    point = b'{"loss":1,"outer":0}'
    text = b'{"loss_curve":[' + (point + b",") * 2_999_999 + point + b"]}"
    assert len(text) < 64 << 20  # under the checkpoint cap: only the value count stops it
    t0 = time.perf_counter()
    with pytest.raises(SparkError, match="more than"):
        load_json(text, "checkpoint.json", max_items=CHECKPOINT_ITEMS)
    assert time.perf_counter() - t0 < 5
