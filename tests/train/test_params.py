"""params.yaml: typos and wrong types are named before anything runs."""
from __future__ import annotations

import pytest
import yaml

from sparktrain.core.errors import SparkError
from sparktrain.params import StepConfig, load_params

BASE = {
    "job": "job-dry-001", "program": "data/programs/train-step.sparkbc", "scale": "tiny",
    "scales": {"tiny": {"dim": 32, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "seq_len": 64}},
    "step": {"outer": 4, "inner": 8, "step": 1, "lr": 0.1},
    "eval": {"data": "data/eval/tiny_heldout.jsonl"},
}


def _load(tmp_path, **changes):
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = doc
        for key in path:
            node = node[key]
        node[last] = value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_params(path)


def test_the_committed_params_load():
    p = load_params("params.yaml")
    assert p.step.outer == 4 and p.step.inner == 8 and p.step.step_n == 1
    assert p.model_config().dim == 32


def test_the_coder_proof_trains_on_a_fixed_shard_count():
    p = load_params("data/programs/coder-proof.yaml")
    assert p.step.shards == 2 and p.step.workers is None  # bytes set here, cores found there


def test_defaults_and_ints_for_floats(tmp_path):
    p = _load(tmp_path, step__lr=1)
    assert p.step.lr == 1.0 and isinstance(p.step.lr, float)
    assert p.step.momentum == StepConfig().momentum


@pytest.mark.parametrize("changes, needle", [
    ({"step__oter": 4}, "unknown key step.oter"),
    ({"evel": {}}, "unknown key evel"),
    ({"step__lr": "fast"}, "step.lr must be float"),
    ({"step__outer": True}, "step.outer must be int"),
    ({"step__train_attn": "yes"}, "step.train_attn must be bool"),
    ({"scales__tiny__dimm": 3}, "unknown key scales.tiny.dimm"),
    ({"scale": "huge"}, "unknown scale 'huge'"),
    ({"scales__tiny__dim": 30}, "not divisible by n_head"),
    ({"step__momentum": 1.5}, "step.momentum"),
])
def test_mistakes_are_named(tmp_path, changes, needle):
    with pytest.raises(SparkError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        _load(tmp_path, **changes)


def test_not_yaml(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("step: [unclosed\n")
    with pytest.raises(SparkError, match="not valid YAML"):
        load_params(path)


# every float knob: the model computes in float32, where these are infinite (or 0)
FLOAT_KNOBS = ["step__lr", "step__clip", "step__weight_decay", "step__adam_lr",
               "step__embed_lr", "step__min_lr", "eval__dynamic_lr", "arch__logit_cap"]


@pytest.mark.parametrize("knob", FLOAT_KNOBS)
@pytest.mark.parametrize("value, needle", [
    (1e308, "float32's largest; it is infinite there"),
    ("1e39", "float32's largest; it is infinite there"),   # as `dvc exp run -S` writes it
    (1e-46, "float32's smallest; it is 0 there"),
])
def test_a_float_knob_float32_cannot_hold_is_refused(tmp_path, knob, value, needle):
    changes = {knob: value}
    if knob.startswith("arch__"):
        changes = {"arch": {knob.split("__")[1]: value}}
    with pytest.raises(SparkError) as err:
        _load(tmp_path, **changes)
    assert str(err.value).startswith(f"params: {knob.replace('__', '.')} must be ")
    assert needle in str(err.value)


def test_float32s_own_extremes_pass(tmp_path):
    p = _load(tmp_path, step__clip=3.4028234663852886e38, step__min_lr=1.5e-45,
              step__schedule="cosine",
              arch={"logit_cap": 3e38})
    assert p.step.clip == 3.4028234663852886e38 and p.step.min_lr == 1.5e-45
    assert p.arch.logit_cap == 3e38
