"""Each step knob declares its role once, on its Field (sparktrain/knobs.py): a knob added
in that one place is recorded, fingerprinted, refused and shown where its role says, the
default job's record and fingerprint keep their keys, and no list of knob names lives
outside the schema modules."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest
from pydantic import Field, ValidationError
from pydantic.dataclasses import dataclass

from sparktrain import knobs
from sparktrain.knobs import ALWAYS, Role, role
from sparktrain.model.config import OPTION_DEFAULTS, SCALES, ModelConfig
from sparktrain.model.device import CPU
from sparktrain.params import STEP_STRICT, ArchOptions, Float, StepConfig, step_record
from sparktrain.train.resume import fingerprint

ROOT = Path(__file__).resolve().parents[2]
CFG = SCALES["tiny"]


@dataclass(frozen=True, config=STEP_STRICT)
class WithNewKnob(StepConfig):
    """StepConfig and one knob more, declared the way a new knob is: one Field."""
    muon_decay: Optional[Float] = Field(None, gt=0, json_schema_extra=role(readers=("muon",)),
                                        description="a knob only optimizer muon reads")


@dataclass(frozen=True, config=STEP_STRICT)
class WithAlwaysKnob(StepConfig):
    """A knob whose role puts it in every record and fingerprint (as the original's are)."""
    tempo: Float = Field(1.0, json_schema_extra=role(record=ALWAYS, fingerprint=ALWAYS))


def _fingerprint(step) -> str:
    job = SimpleNamespace(id="job-1", sparkbc_sha256="0" * 64, base="init")
    return fingerprint(job, CFG, "data-sha", step, CPU)


def test_a_new_knob_at_its_default_changes_no_record_and_no_fingerprint():
    plain, added = StepConfig(), WithNewKnob()
    assert step_record(added) == step_record(plain)
    assert _fingerprint(added) == _fingerprint(plain)  # a state saved before it still resumes


def test_a_new_knob_set_is_recorded_and_fingerprinted():
    base = WithNewKnob(optimizer="muon")
    step = dataclasses.replace(base, muon_decay=0.5)
    assert step_record(step)["muon_decay"] == 0.5
    assert "muon_decay" not in step_record(base)
    assert knobs.fingerprinted(step)["muon_decay"] == 0.5
    assert _fingerprint(step) != _fingerprint(base)  # another run: its saved state is not this


def test_a_new_knob_is_refused_for_an_optimizer_that_does_not_read_it():
    with pytest.raises(ValidationError, match="muon_decay applies to optimizer muon, not adamw"):
        WithNewKnob(optimizer="adamw", muon_decay=0.5)
    WithNewKnob(optimizer="adamw")  # at its default it is no one's business
    # spark bench --optimizer sgd puts it back to its default with the other muon knobs
    reset = knobs.read_only_by_others(WithNewKnob, "sgd")
    assert reset["muon_decay"] is None and reset["adam_lr"] is None
    assert "muon_decay" not in knobs.read_only_by_others(WithNewKnob, "muon")


def test_a_new_knob_is_in_the_recipe_and_on_the_card():
    assert "muon_decay" in knobs.recipe(WithNewKnob)
    assert "muon_decay" in knobs.card(WithNewKnob)
    assert knobs.card(StepConfig) == knobs.card(WithNewKnob)[:-1]


def test_an_always_knob_is_in_every_record_and_fingerprint():
    step = WithAlwaysKnob()
    assert step_record(step)["tempo"] == 1.0
    assert knobs.fingerprinted(step)["tempo"] == 1.0
    assert _fingerprint(step) != _fingerprint(StepConfig())


def test_a_role_with_a_typo_is_refused_where_it_is_declared():
    with pytest.raises(TypeError):
        role(recorded=ALWAYS)
    with pytest.raises(ValueError, match="not 'sometimes'"):
        role(record="sometimes")


def test_the_default_job_keeps_its_record_and_fingerprint_keys():
    """The bytes of checkpoint.json and the resume state of every earlier run: the original's
    nine knobs in the record; every knob in the fingerprint but the workers, the device,
    stop_after_pass, an unset embed_lr, dropout 0, keep_best off, the random sampling and no
    ema."""
    step = StepConfig()
    assert set(step_record(step)) == {"outer", "inner", "lr", "batch_size", "seed", "clip",
                                      "momentum", "train_attn", "train_embed"}
    unfingerprinted = {"workers", "device", "stop_after_pass", "embed_lr", "keep_best",
                       "dropout", "sampling", "ema"}
    assert set(knobs.fingerprinted(step)) == set(StepConfig.__pydantic_fields__) - unfingerprinted
    assert "embed_lr" in knobs.fingerprinted(dataclasses.replace(step, optimizer="adamw",
                                                                 embed_lr=0.2))
    assert "shards" in step_record(dataclasses.replace(step, shards=2))
    on = dataclasses.replace(step, dropout=0.1)
    assert step_record(on)["dropout"] == 0.1 and "dropout" in knobs.fingerprinted(on)


def test_every_step_field_has_a_readable_role():
    for name, r in knobs.roles(StepConfig).items():
        assert isinstance(r, Role), name
        assert r.readers is None or set(r.readers) <= {"sgd", "adamw", "muon"}, name


# the schema modules, where knobs are declared; and the one older file format that names some
SCHEMA = {"sparktrain/params.py", "sparktrain/knobs.py"}
FORMAT = {("sparktrain/core/compat.py", "PRE_STEP_FAILURE_KNOBS")}


def _knob_lists(text: str, rel: str, names: set[str]):
    """(line, names) of each literal tuple, list or set holding two or more knob names, but
    the FORMAT ones (a dict literal is a record's fields, each named by what it holds)."""
    tree = ast.parse(text)
    exempt = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and any((rel, getattr(t, "id", "")) in FORMAT for t in n.targets)}
    for node in ast.walk(tree):
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
        found = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
        if len(found) >= 2 and id(node) not in exempt:
            yield node.lineno, found


def test_no_list_of_knob_names_outside_the_schema():
    names = set(StepConfig.__pydantic_fields__)
    found = []
    for path in sorted([*(ROOT / "sparktrain").rglob("*.py"), *(ROOT / "stages").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in SCHEMA:
            found += [f"{rel}:{line} {hit}" for line, hit in
                      _knob_lists(path.read_text(encoding="utf-8"), rel, names)]
    assert not found, "knob names listed outside the schema (declare a role instead):\n" + \
        "\n".join(found)


def test_the_search_finds_a_list_of_knob_names():
    names = set(StepConfig.__pydantic_fields__)
    text = 'SKIP = ("workers", "device")\nfor k in ["lr", "seed", "x"]:\n    pass\n'
    assert [line for line, _ in _knob_lists(text, "sparktrain/x.py", names)] == [1, 2]
    assert not list(_knob_lists('PRE_STEP_FAILURE_KNOBS = ("lr", "outer", "inner")\n',
                                "sparktrain/core/compat.py", names))


def test_the_arch_options_defaults_are_modelconfigs():
    """params.yaml's `arch` section offers exactly ModelConfig's options, at its defaults
    (typed once, on ModelConfig's fields)."""
    assert dataclasses.asdict(ArchOptions()) == OPTION_DEFAULTS
    assert set(OPTION_DEFAULTS) == {"mlp", "qk_norm", "logit_cap", "bigram", "value_residual",
                                    "unet"}
    assert ModelConfig().options() == {}
    assert ModelConfig(bigram=8).to_dict()["bigram"] == 8
    assert "bigram" not in ModelConfig().to_dict()  # absent from a recorded arch: the default
