"""params.yaml: the one typed schema of the whole file, validated by pydantic.

`StepConfig`'s fields (type, default, bounds, help) are the training knobs: params.yaml's
step section, the `spark train` / `spark run` flags and the checkpoint's record. A bad key
or value is one line naming it, before anything runs. See docs/pipeline.md.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from pydantic import ValidationError, model_validator
from pydantic.dataclasses import dataclass

from sparktrain.vocab import MAX_VOCAB, MIN_BPE_VOCAB, TOKENIZERS
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import read_input
from sparktrain.core.jobfiles import PARAMS_FILE, check_job_id
from sparktrain.schema_errors import one_line
from sparktrain.schema_types import Count, Float
from sparktrain.knobs import ALWAYS, NEVER, recorded, role, unread
from sparktrain.model.config import MAX_BIGRAM, MLPS, OPTION_DEFAULTS, ModelConfig, scale_config
from sparktrain.model.devices import DEVICES
from sparktrain.core.safeload import load_yaml

STRICT = ConfigDict(extra="forbid")
# `step.step` (params.yaml) and `--step` are the original's names; the code's is `step_n`
STEP_STRICT = ConfigDict(extra="forbid", populate_by_name=True)


DYNAMIC_RULES = ("rms", "sgd", "adamw")  # dynamic evaluation's updates (eval/dynamic.py)
# docs/pipeline.md ("Hostile inputs"): the loss curve holds outer + 1 points, a pass inner steps
MAX_OUTER = 100_000
MAX_MICRO_STEPS = 100_000_000
# step.optimizer's choices (train/optim.py has a class for each), with the copies of the
# weights each keeps at most (model/memory.py's estimate; SGD without momentum keeps none)
OPTIMIZER_MOMENTS = {"sgd": 1, "adamw": 2, "muon": 2}
OPTIMIZERS = tuple(OPTIMIZER_MOMENTS)
# optimizer muon's AdamW rate (embedding, LM head, norms) when step.adam_lr is not given
MUON_ADAM_LR = 0.005


def cooldown_steps(cooldown: float, micro_steps: int) -> int:
    """The wsd cool-down's micro-steps: the `cooldown` fraction of the run, rounded, and at
    least one when the fraction is not 0, so the rate reaches min_lr on the last step
    (docs/training.md)."""
    return max(round(cooldown * micro_steps), 1) if cooldown > 0 else 0


# A knob's role (sparktrain/knobs.py; docs/outputs.md "A knob's role"), declared on its
# Field: the original's knobs are in every record; the later ones only off their defaults,
# so earlier runs keep their bytes; the resume fingerprint holds both kinds always. A knob
# with no role is left out of both at its default: a state saved before it still resumes.
ORIGINAL = role(record=ALWAYS, fingerprint=ALWAYS)
LATER = role(fingerprint=ALWAYS)
# the step's place, stamp and processes: never recorded among the knobs, not the recipe
UNRECORDED = {"record": NEVER, "recipe": False, "card": False}


@dataclass(frozen=True, config=STEP_STRICT)
class StepConfig:
    outer: Count = Field(4, json_schema_extra=ORIGINAL, description="outer passes; the "
                         "whole-dataset loss is logged after each")
    inner: Count = Field(8, json_schema_extra=ORIGINAL,
                         description="SGD micro-steps per outer pass")
    step_n: Optional[Count] = Field(
        None, alias="step", json_schema_extra=role(**UNRECORDED, fingerprint=ALWAYS),
        description="step_n stamped into the weights (default 1, or the base's step_n + 1)")
    # not the recipe: params.yaml's own rate (0.03) is not the schema's (0.1), and a rate
    # alone does not make the pairs job's byte / SGD 4 x 8 recipe one for a corpus
    lr: Float = Field(0.1, gt=0, json_schema_extra=role(record=ALWAYS, fingerprint=ALWAYS,
                                                        recipe=False),
                      description="learning rate")
    batch_size: Count = Field(8, json_schema_extra=ORIGINAL, description="pairs per "
                              "micro-step (>= rows: the whole dataset in file order)")
    seed: StrictInt = Field(0, ge=0, json_schema_extra=role(record=ALWAYS, fingerprint=ALWAYS,
                                                            recipe=False),
                            description="init and minibatch seed")
    clip: Float = Field(1.0, ge=0, json_schema_extra=ORIGINAL,
                        description="global gradient-norm clip, 0 = off")
    momentum: Float = Field(0.9, ge=0, lt=1, json_schema_extra=ORIGINAL,
                            description="SGD momentum, 0 = plain SGD")
    train_attn: StrictBool = Field(True, json_schema_extra=ORIGINAL, description="false: the "
                                   "mean-pool fallback model (embed + lm_head only)")
    train_embed: StrictBool = Field(True, json_schema_extra=ORIGINAL,
                                    description="false: spark.embed.weight stays frozen")
    shards: Count = Field(1, json_schema_extra=role(fingerprint=ALWAYS, recipe=False),
                          description="fixed row shards per micro-step, their gradients "
                          "summed in shard order: the bytes depend on it, 1 = the whole batch "
                          "at once")
    workers: Optional[Count] = Field(None, json_schema_extra=role(**UNRECORDED,
                                                                  fingerprint=NEVER),
                                     description="processes computing the shards (default "
                                     "SPARK_WORKERS, else the usable cores); never changes bytes")
    # Optimisation for real runs. At their defaults the loop is heavy-ball SGD.
    optimizer: Literal[OPTIMIZERS] = Field(
        "sgd", json_schema_extra=LATER,
        description="sgd (heavy-ball, momentum), adamw, or muon (Muon on the "
                    "layers' matrices, AdamW at adam_lr on embedding, head, norms)")
    weight_decay: Float = Field(0.0, ge=0, json_schema_extra=role(fingerprint=ALWAYS,
                                                                  readers=("adamw", "muon")),
                                description="AdamW / Muon decoupled weight decay on matrices")
    sampling: Literal["random", "epoch"] = Field("random", description="corpus jobs' windows: "
        "random starts, or epoch: each pass over the stream cut anew, in a random order")
    ema: Optional[Float] = Field(None, gt=0, lt=1, description="commit an exponential moving "
                                 "average of the weights with this decay (torch's EMA)")
    adam_lr: Optional[Float] = Field(None, gt=0, json_schema_extra=role(fingerprint=ALWAYS,
                                                                        readers=("muon",)),
                                     description="optimizer muon: the AdamW group's learning "
                                     f"rate (default {MUON_ADAM_LR}), scheduled like lr")
    # fingerprinted only when set: a state saved before this knob existed still resumes
    embed_lr: Optional[Float] = Field(None, gt=0, json_schema_extra=role(
        readers=("adamw", "muon")), description="adamw, muon: the token embedding's and "
        "bigram table's rate (default their group's)")
    muon_momentum: Float = Field(0.95, ge=0, lt=1, json_schema_extra=LATER,
                                 description="optimizer muon: Nesterov momentum of the matrices")
    muon_ns: Literal["jordan", "polar"] = Field(
        "jordan", json_schema_extra=role(fingerprint=ALWAYS, readers=("muon",)),
        description="optimizer muon: Newton-Schulz coefficients, jordan (fixed, "
                    "torch.optim.Muon's) or polar (Polar Express, one set a step)")
    normuon: StrictBool = Field(False, json_schema_extra=role(fingerprint=ALWAYS,
                                                              readers=("muon",)),
                                description="optimizer muon: NorMuon, each orthogonalised "
                                "update normalised by a running second moment per row (per "
                                "column when wider), then rescaled to its norm")
    beta1: Float = Field(0.9, ge=0, lt=1, json_schema_extra=LATER,
                         description="AdamW first-moment decay")
    beta2: Float = Field(0.95, ge=0, lt=1, json_schema_extra=LATER,
                         description="AdamW second-moment decay")
    schedule: Literal["constant", "cosine", "wsd"] = Field(
        "constant", json_schema_extra=LATER,
        description="learning rate: constant; linear warm-up then cosine "
                    "decay to min_lr; or wsd: warm-up, constant, then a linear "
                    "cool-down to min_lr over the last `cooldown` fraction")
    warmup: StrictInt = Field(0, ge=0, json_schema_extra=LATER,
                              description="warm-up micro-steps (cosine, wsd)")
    min_lr: Float = Field(0.0, ge=0, json_schema_extra=LATER, description="floor of the "
                          "cosine decay / end of the wsd cool-down")
    cooldown: Float = Field(0.0, ge=0, le=1, json_schema_extra=LATER, description="wsd: "
                            "fraction of the micro-steps spent cooling down to min_lr")
    init_out: Literal["scaled", "zero", "zero_head"] = Field(
        "scaled", json_schema_extra=LATER,
        description="init of the residual-out projections (o, mlp_down): "
                    "normal(0, 0.02/sqrt(2 n_layer)), or zero; zero_head: those "
                    "and the LM head zero")
    dropout: Float = Field(0.0, ge=0, lt=1, description="training only: dropout on each "
                           "block's attention and MLP outputs (PyTorch's), 0 = off")
    checkpoint_every: StrictInt = Field(0, ge=0, json_schema_extra=role(fingerprint=ALWAYS,
                                                                        recipe=False),
                                        description="save a resumable state every N outer "
                                        "passes (0 = off)")
    # not fingerprinted: a state saved after pass j resumes a run stopped at k >= j, or a whole one
    stop_after_pass: StrictInt = Field(0, ge=0, json_schema_extra=role(fingerprint=NEVER,
                                                                       recipe=False),
                                       description="end the run after this outer pass, with "
                                       "the learning-rate schedule of all `outer` passes (0 = "
                                       "run every pass; spark tune's pruned trials)")
    keep_best: StrictBool = Field(False, json_schema_extra=role(recipe=False),
                                  description="commit the weights of the outer pass with the "
                                  "lowest held-out loss, not the last's (kept_pass)")
    # the checkpoint's own `device` field names the one actually used
    device: Literal[DEVICES] = Field(
        "cpu", json_schema_extra=role(**UNRECORDED, fingerprint=NEVER),
        description="where the arrays live: cpu (numpy, the reference bytes), cuda or "
                    "mps (the gpu extra), auto = a GPU when one is seen (docs/gpu.md)")

    @model_validator(mode="after")
    def _coherent(self):
        n = self.outer * self.inner  # micro-steps
        if self.outer > MAX_OUTER:
            raise ValueError(f"outer {self.outer:,} is above the limit of {MAX_OUTER:,} passes")
        if self.stop_after_pass >= self.outer:
            raise ValueError(f"stop_after_pass {self.stop_after_pass} is not before the last "
                             f"of the run's {self.outer} outer passes (0 = run them all)")
        if n > MAX_MICRO_STEPS:
            raise ValueError(f"outer x inner = {n:,} micro-steps is above the limit of "
                             f"{MAX_MICRO_STEPS:,}")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr {self.min_lr} is above lr {self.lr}")
        if self.schedule == "constant" and (self.warmup or self.min_lr):
            raise ValueError("warmup and min_lr need schedule: cosine or wsd")
        if self.warmup > n:
            raise ValueError(f"warmup {self.warmup} is longer than the run's "
                             f"{n} micro-steps (outer x inner)")
        if self.schedule != "wsd" and self.cooldown:
            raise ValueError("cooldown needs schedule: wsd")
        cooling = cooldown_steps(self.cooldown, n)
        if self.schedule == "wsd" and self.warmup + cooling > n:
            raise ValueError(f"warmup {self.warmup} and cooldown {self.cooldown} overlap "
                             f"within {n} micro-steps")
        if self.ema is not None and self.keep_best:
            raise ValueError("ema commits the average of the weights; keep_best a pass's own")
        for name, readers in unread(self, self.optimizer).items():
            raise ValueError(f"{name} applies to optimizer{'s' * (len(readers) > 1)} "
                             f"{' and '.join(readers)}, not {self.optimizer}")
        return self

    def passes(self) -> int:
        """The outer passes the run makes: `outer`, or `stop_after_pass` when set."""
        return self.stop_after_pass or self.outer

    def adam_lr_or_default(self) -> float:
        """optimizer muon's rate of its AdamW group."""
        return MUON_ADAM_LR if self.adam_lr is None else self.adam_lr


@dataclass(frozen=True, config=STRICT)
class EvalConfig:
    data: StrictStr = Field("data/eval/tiny_heldout.jsonl", description="held-out JSONL (never "
                            "training rows)")
    batch_size: Count = Field(64, description="pairs per forward")
    max_new: Annotated[StrictInt, Field(ge=1, le=4096)] = Field(
        48, description="generation cap for exact_match")
    n_samples: Annotated[StrictInt, Field(ge=0, le=1000)] = Field(
        3, description="generated samples kept in the eval output")
    stride: Optional[Count] = Field(None, description="corpus jobs' sliding-window held-out "
                                    "score: windows every `stride` tokens, each target scored "
                                    "once with >= seq_len - stride tokens of context (default "
                                    "seq_len / 4; seq_len = the non-overlapping score)")
    dynamic_lr: Optional[Float] = Field(None, gt=0, description="corpus jobs' dynamic "
                                        "evaluation (bpb_dynamic): each held-out piece scored, "
                                        "then learned from at this rate; unset = off")
    dynamic_rule: Literal[DYNAMIC_RULES] = Field("rms", description="its update: rms "
                                                 "(RMS-normalised SGD), sgd or adamw")
    dynamic_decay: Annotated[Float, Field(ge=0, le=1)] = Field(
        0.0, description="its pull back towards the trained weights, per update")
    dynamic_stride: Optional[Count] = Field(None, description="its piece in tokens, scored in "
                                            "the seq_len window ending with it (default: stride)")


def _patterns(value):
    """`glob: "**/*.py"` or a list of patterns."""
    if isinstance(value, (str, tuple)):   # a tuple: a CorpusConfig's own, through override()
        value = [value] if isinstance(value, str) else list(value)
    if not isinstance(value, list) or not value \
            or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"must be a glob or a list of globs, got {value!r}")
    return tuple(value)


@dataclass(frozen=True, config=STRICT)
class CorpusConfig:
    """How a job whose dataset is a folder (or @stdlib) reads it (sparktrain/data/corpus.py)."""
    glob: Annotated[tuple[str, ...], BeforeValidator(_patterns)] = Field(
        ("**/*.py",), description="files of the corpus, relative to its root")
    heldout: Float = Field(0.1, gt=0, lt=1, description="fraction of files held out, chosen "
                           "by a hash of the path")
    extra: Annotated[tuple[str, ...], BeforeValidator(lambda v: () if v in ((), []) else
                     _patterns(v))] = Field((), description="globs under site-packages, read "
                                            "into the train split only (none: [])")


@dataclass(frozen=True, config=STRICT)
class ArchOptions:
    """params.yaml's `arch`: the attention model's opt-in options, their defaults those of
    ModelConfig (docs/model.md "Architecture options"). At their defaults a job's bytes
    are those of a params file without the section."""
    mlp: Literal[MLPS] = Field(OPTION_DEFAULTS["mlp"], description="the MLP: swiglu (gate, "
                               "up, down) or relu2 (relu(h Wup)^2 Wdown, no gate)")
    qk_norm: StrictBool = Field(OPTION_DEFAULTS["qk_norm"], description="rms-normalise q and "
                                "k per head (no weight)")
    logit_cap: Float = Field(OPTION_DEFAULTS["logit_cap"], ge=0, description="> 0: logits = "
                             "cap * tanh(logits / cap); 0 = off")
    bigram: Annotated[StrictInt, Field(ge=0, le=MAX_BIGRAM)] = Field(
        OPTION_DEFAULTS["bigram"], description="> 0: buckets of a hashed (previous, current) "
                                               "token embedding added to the token's; 0 = off")
    value_residual: StrictBool = Field(OPTION_DEFAULTS["value_residual"], description="layers "
                                       "after the first mix the first's attention values into "
                                       "theirs, by a learned scalar")
    unet: StrictBool = Field(OPTION_DEFAULTS["unet"], description="U-net skips: block i < "
                             "n_layer // 2's output, times a learned scalar, added to block "
                             "n_layer-1-i's input")


@dataclass(frozen=True, config=STRICT)
class ScaleRow:
    """A row of params.yaml's `scales`: a new scale (all five keys) or an
    override of some keys of a built-in one (model/config.py SCALES)."""
    dim: Optional[StrictInt] = None
    n_layer: Optional[StrictInt] = None
    n_head: Optional[StrictInt] = None
    n_kv_head: Optional[StrictInt] = None
    seq_len: Optional[StrictInt] = None

    def given(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _job_id(value):
    try:
        return check_job_id(value)
    except SparkError as err:
        raise ValueError(str(err)) from None


@dataclass(frozen=True, config=STRICT)
class Params:
    job: Annotated[StrictStr, BeforeValidator(_job_id)]
    program: StrictStr
    scale: StrictStr = "tiny"
    scales: dict[StrictStr, ScaleRow] = Field(default_factory=dict)
    step: StepConfig = Field(default_factory=StepConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    tokenizer: Literal[TOKENIZERS] = Field("byte", description="byte tokens or a byte-level "
                                           "BPE trained on the train split")
    vocab_size: Annotated[StrictInt, Field(ge=MIN_BPE_VOCAB, le=MAX_VOCAB)] = Field(
        1024, description="BPE vocab, BOS/SEP/EOS included (byte: ignored)")
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    arch: ArchOptions = Field(default_factory=ArchOptions)

    def model_config(self) -> ModelConfig:
        return model_config(self.scale, self.scales, train_attn=self.step.train_attn,
                            options=dataclasses.asdict(self.arch))

    def heldout(self) -> str | None:
        """The held-out pairs measured after every pass: eval.data."""
        return self.eval.data


def model_config(scale: str, scales: dict | None = None, *, train_attn: bool = True,
                 options: dict | None = None, **overrides) -> ModelConfig:
    """The arch of a named scale (model/config.py scale_config) with params.yaml's `scales`."""
    rows = {name: row.given() if isinstance(row, ScaleRow) else dict(row)
            for name, row in (scales or {}).items()}
    return scale_config(scale, rows, train_attn=train_attn, options=options, **overrides)


@dataclass(frozen=True, config=STRICT)
class Defaults(Params):
    """What a command uses when it reads no params file: every knob's default."""
    job: Optional[StrictStr] = None
    program: Optional[StrictStr] = None

    def heldout(self) -> str | None:
        return None  # no params file: a held-out file only when one is given


def load_params_or_defaults(path: str | Path | None = None, *,
                            default_file: bool = True) -> "Params | Defaults":
    """The params of `path`; without one, ./params.yaml when it exists (and
    `default_file`); else the knobs' defaults (a Defaults)."""
    if path is None and default_file and Path(PARAMS_FILE).is_file():
        path = PARAMS_FILE
    return Defaults() if path is None else load_params(path)


def _known_keys(parts: tuple) -> list[str]:
    """The keys params.yaml's schema allows beside the last of `parts` (a dotted key's
    pieces), by their YAML names (`step.step`, not step_n)."""
    owner = {(): Params, ("step",): StepConfig, ("eval",): EvalConfig,
             ("corpus",): CorpusConfig}.get(tuple(parts[:-1]))
    if owner is None and len(parts) == 3 and parts[0] == "scales":
        owner = ScaleRow
    if owner is None:
        return []
    return [getattr(f.default, "alias", None) or f.name for f in dataclasses.fields(owner)]


def parse_params(raw, schema: type[Params] = Params) -> Params:
    if not isinstance(raw, dict):
        raise SparkError("params: expected a mapping of params")
    # an empty section (`eval:` with nothing under it) means its defaults
    raw = {k: v for k, v in raw.items()
           if not (v is None and k in ("scales", "step", "eval", "corpus"))}
    try:
        params = schema(**raw)
    except ValidationError as err:
        raise SparkError(one_line(err, _known_keys)) from None
    except TypeError as err:  # a key that is not an identifier, e.g. `1: x`
        raise SparkError(f"params: {err}") from None
    seq_len = params.model_config().seq_len  # the scale's name and arch: checked now, not mid-run
    for key in ("stride", "dynamic_stride"):  # eval would refuse them only after training
        if (value := getattr(params.eval, key)) is not None and value > seq_len:
            raise SparkError(f"params: eval.{key} {value} is above seq_len {seq_len} (scale "
                             f"{params.scale}); give at most {seq_len}, or leave it out")
    return params


def load_params(path: str | Path = PARAMS_FILE, schema: type[Params] = Params) -> Params:
    """`schema` Defaults: a file that may hold only the keys it changes (`spark train
    --params`), job and program too. No aliases, bounded depth (core/safeload.py)."""
    return parse_params(load_yaml(read_input(Path(path), "params file"), str(path)), schema)


def step_record(step: StepConfig) -> dict:
    """The knobs as checkpoint.json records them: each by its role (sparktrain/knobs.py)."""
    return recorded(step)


def override(cfg, **changes):
    """dataclasses.replace with the None values dropped, re-validated; a bad
    value is one line naming the knob."""
    try:
        return dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None})
    except ValidationError as err:
        section = {StepConfig: "step", EvalConfig: "eval"}.get(type(cfg), "")
        raise SparkError(one_line(err, _known_keys, section)) from None
