"""The STEP knobs and params.yaml: one typed config, guarded overrides.

Unknown keys and wrong types raise a one-line SparkError naming the key
(`step.oter`), before any training starts (nanoGPT configurator's guard rails).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path

from sparktrain.errors import SparkError
from sparktrain.model.config import SCALES, ModelConfig

ARCH_KEYS = ("dim", "n_layer", "n_head", "n_kv_head", "seq_len")


@dataclass(frozen=True)
class StepConfig:
    outer: int = 4            # passes; the whole-dataset loss is logged after each
    inner: int = 8            # SGD micro-steps per pass
    step: int | None = None   # step_n stamped into the weights; None: 1, or base's step_n + 1
    lr: float = 0.1           # SGD learning rate
    batch_size: int = 8       # pairs per micro-step (>= n: whole dataset in file order)
    seed: int = 0             # init and minibatch permutation
    clip: float = 1.0         # global gradient-norm clip; 0 = off
    momentum: float = 0.9     # heavy-ball momentum; 0 = plain SGD
    train_attn: bool = True   # False: the mean-pool fallback model
    train_embed: bool = True  # False: spark.embed.weight stays frozen

    def validate(self) -> "StepConfig":
        for name in ("outer", "inner", "batch_size"):
            if getattr(self, name) < 1:
                raise SparkError(f"step.{name} must be >= 1, got {getattr(self, name)}")
        if self.step is not None and self.step < 1:
            raise SparkError(f"step.step must be >= 1, got {self.step}")
        if not self.lr > 0:
            raise SparkError(f"step.lr must be > 0, got {self.lr}")
        if self.clip < 0:
            raise SparkError(f"step.clip must be >= 0 (0 = off), got {self.clip}")
        if not 0 <= self.momentum < 1:
            raise SparkError(f"step.momentum must be in [0, 1), got {self.momentum}")
        if self.seed < 0:
            raise SparkError(f"step.seed must be >= 0, got {self.seed}")
        return self


@dataclass(frozen=True)
class EvalConfig:
    data: str = "data/eval/tiny_heldout.jsonl"  # held-out JSONL (never training rows)
    batch_size: int = 64                        # pairs per forward
    max_new: int = 48                           # generation cap for exact_match
    n_samples: int = 3                          # generated samples kept in eval.json


@dataclass(frozen=True)
class Params:
    job: str
    program: str
    scale: str
    scales: dict
    step: StepConfig
    eval: EvalConfig

    def model_config(self) -> ModelConfig:
        return model_config(self.scale, self.scales, train_attn=self.step.train_attn)


def model_config(scale: str, scales: dict | None = None, *, train_attn: bool = True,
                 **overrides) -> ModelConfig:
    """The arch of a named scale, with per-knob overrides (None = keep)."""
    table = {k: v.to_dict() if isinstance(v, ModelConfig) else dict(v)
             for k, v in (scales or SCALES).items()}
    if scale not in table:
        raise SparkError(f"unknown scale {scale!r}; known: {', '.join(sorted(table))}")
    arch = {k: table[scale][k] for k in ARCH_KEYS}
    arch.update({k: v for k, v in overrides.items() if v is not None})
    return ModelConfig(**arch, train_attn=train_attn).validate()


def _check_type(key: str, value, want):
    """Strict YAML types: bool is not an int, an int is accepted for a float."""
    if want is bool:
        ok = isinstance(value, bool)
    elif want is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif want is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif want is str:
        ok = isinstance(value, str)
    else:
        ok = True
    if not ok:
        raise SparkError(f"params: {key} must be {want.__name__}, got {type(value).__name__} {value!r}")
    return float(value) if want is float else value


_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "int | None": int}


def build_dataclass(cls, section: dict, prefix: str):
    """cls(**section) with every key known and every value of its declared type."""
    if not isinstance(section, dict):
        raise SparkError(f"params: {prefix} must be a mapping, got {type(section).__name__}")
    known = {f.name: f for f in fields(cls)}
    for key in section:
        if key not in known:
            raise SparkError(f"params: unknown key {prefix}.{key} "
                             f"(known: {', '.join(known)})")
    values = {}
    for key, value in section.items():
        f = known[key]
        if value is None and "None" in str(f.type):
            values[key] = None
            continue
        values[key] = _check_type(f"{prefix}.{key}", value, _TYPES[str(f.type)])
    return cls(**values)


TOP_KEYS = ("job", "program", "scale", "scales", "step", "eval")


def load_params(path: str | Path = "params.yaml") -> Params:
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SparkError(f"{path} does not exist") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise SparkError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(raw, dict):
        raise SparkError(f"{path}: expected a mapping of params")
    for key in raw:
        if key not in TOP_KEYS:
            raise SparkError(f"params: unknown key {key} (known: {', '.join(TOP_KEYS)})")
    for key in ("job", "program", "scale"):
        if key not in raw:
            raise SparkError(f"params: missing key {key}")
        _check_type(key, raw[key], str)
    scales = raw.get("scales") or {k: v.to_dict() for k, v in SCALES.items()}
    if not isinstance(scales, dict):
        raise SparkError("params: scales must be a mapping of scale name -> arch")
    for name, arch in scales.items():
        if not isinstance(arch, dict):
            raise SparkError(f"params: scales.{name} must be a mapping")
        for key, value in arch.items():
            if key not in ARCH_KEYS:
                raise SparkError(f"params: unknown key scales.{name}.{key} "
                                 f"(known: {', '.join(ARCH_KEYS)})")
            _check_type(f"scales.{name}.{key}", value, int)
        missing = [k for k in ARCH_KEYS if k not in arch]
        if missing:
            raise SparkError(f"params: scales.{name} lacks {', '.join(missing)}")
    step = build_dataclass(StepConfig, raw.get("step") or {}, "step").validate()
    ev = build_dataclass(EvalConfig, raw.get("eval") or {}, "eval")
    params = Params(job=raw["job"], program=raw["program"], scale=raw["scale"],
                    scales=scales, step=step, eval=ev)
    params.model_config()  # validates the scale name and its arch now, not mid-run
    return params


def override(cfg, **changes):
    """dataclasses.replace with the None values dropped (CLI flags not given)."""
    return dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None})
