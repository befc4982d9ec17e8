"""The typed config (its opt-in options' defaults typed once, here), the scale table, and
the two model kinds' rules and shape table: sizes, FLOPs, tensor names (docs/model.md,
"Tensors"). Nothing but the config: checking params never loads the model code, which
extends these."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from sparktrain.vocab import BYTE_VOCAB, MAX_VOCAB
from sparktrain.core.errors import SparkError, did_you_mean
from sparktrain.core.values import is_count, is_number

VOCAB = BYTE_VOCAB
MAX_PARAMS = 200_000_000
MAX_SEQ_LEN = 4096
MAX_LAYERS = 1024  # the shape table has 9 tensors a layer: keep it a table, not a flood
MAX_SHARDS = 65_536  # a step's row shards (model/parallel.py): a shard is at least a row


def option(default):
    """A field of ModelConfig that is an opt-in option, with its default."""
    return field(default=default, metadata={"option": True})


@dataclass(frozen=True)
class ModelConfig:
    dim: int = 32          # residual width
    n_layer: int = 2       # decoder blocks
    n_head: int = 4        # query heads
    n_kv_head: int = 2     # key/value heads (GQA: n_head must be a multiple)
    seq_len: int = 64      # context window in tokens
    vocab: int = VOCAB     # from the tokenizer: 256 bytes (0xFD/0xFE/0xFF the specials) or BPE
    train_attn: bool = True  # False: the mean-pool fallback (embed + lm_head only)
    # Opt-in options of the attention model (docs/model.md "Architecture options"): each
    # default typed here only; a config records them only when they differ from it (to_dict)
    mlp: str = option("swiglu")  # "relu2": relu(h @ Wup.T)^2 @ Wdown.T, two matrices, no gate
    qk_norm: bool = option(False)  # q and k rms-normalised per head (no weight) before scores
    logit_cap: float = option(0.0)  # > 0: logits = cap * tanh(logits / cap); 0 = off
    bigram: int = option(0)  # > 0: buckets of a hashed (previous, current) token embedding
    value_residual: bool = option(False)  # layers 1.. mix the first layer's values into theirs
    unet: bool = option(False)  # block i's output added (weighted) to block n_layer-1-i's input

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    @property
    def kind(self) -> type[Arch]:
        """The model kind this config describes."""
        return AttentionArch if self.train_attn else MeanPoolArch

    def validate(self) -> "ModelConfig":
        """Raise SparkError (one line) for an architecture we cannot build."""
        for f in ARCH_KEYS:
            v = getattr(self, f)
            if not is_count(v) or v < 1:
                raise SparkError(f"{f} must be a positive integer, got {v!r}")
        if not is_count(self.vocab) or not VOCAB <= self.vocab <= MAX_VOCAB:
            raise SparkError(f"vocab must be an integer in [{VOCAB}, {MAX_VOCAB}] (bytes, or "
                             f"a BPE tokenizer's vocab), got {self.vocab!r}")
        if self.n_layer > MAX_LAYERS:
            raise SparkError(f"n_layer {self.n_layer} is above the limit of {MAX_LAYERS}")
        if self.seq_len > MAX_SEQ_LEN:
            raise SparkError(f"seq_len {self.seq_len} is above the limit of {MAX_SEQ_LEN}")
        if self.mlp not in MLPS:
            raise SparkError(f"mlp must be one of {', '.join(MLPS)}, got {self.mlp!r}")
        if not isinstance(self.qk_norm, bool):
            raise SparkError(f"qk_norm must be true or false, got {self.qk_norm!r}")
        if not is_number(self.logit_cap) or not 0 <= self.logit_cap < math.inf:
            raise SparkError(f"logit_cap must be a number >= 0 (0 = off), got "
                             f"{self.logit_cap!r}")
        if not is_count(self.bigram) or self.bigram > MAX_BIGRAM:
            raise SparkError(f"bigram must be an integer in [0, {MAX_BIGRAM}] (buckets; 0 = "
                             f"off), got {self.bigram!r}")
        for name in ("value_residual", "unet"):
            if not isinstance(getattr(self, name), bool):
                raise SparkError(f"{name} must be true or false, got {getattr(self, name)!r}")
            if getattr(self, name) and self.n_layer < 2:
                raise SparkError(f"{name} needs at least 2 layers (it joins layers), got "
                                 f"n_layer {self.n_layer}")
        if self.options() and not self.train_attn:
            raise SparkError(f"the options {', '.join(self.options())} need the attention "
                             f"model (train_attn: true)")
        size = self.kind(self).n_params  # the kind checks its own rules first
        if size > MAX_PARAMS:
            raise SparkError(
                f"model would have {size:,} parameters, above the limit of {MAX_PARAMS:,}")
        return self

    def to_dict(self) -> dict:
        """Every field, less the options at their defaults: a run without them keeps the
        bytes of its checkpoint, weights metadata and plans."""
        return {k: v for k, v in asdict(self).items()
                if not (k in OPTION_DEFAULTS and v == OPTION_DEFAULTS[k])}

    def options(self) -> dict:
        """The options that differ from their defaults, by name."""
        return {k: getattr(self, k) for k in OPTION_DEFAULTS
                if getattr(self, k) != OPTION_DEFAULTS[k]}

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise SparkError(f"unknown arch key(s): {', '.join(unknown)}")
        return cls(**d)


# the options and their defaults: absent from a recorded arch means the default
OPTION_DEFAULTS = {f.name: f.default for f in fields(ModelConfig) if f.metadata.get("option")}
MAX_BIGRAM = 1 << 20  # buckets
MLPS = ("swiglu", "relu2")
# a scale's keys: vocab comes from the tokenizer, train_attn from the step knobs
ARCH_KEYS = tuple(f.name for f in fields(ModelConfig)
                  if f.name not in ("vocab", "train_attn", *OPTION_DEFAULTS))
# what a recorded arch must hold
REQUIRED_ARCH = tuple(f.name for f in fields(ModelConfig) if f.name not in OPTION_DEFAULTS)

SCALES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(dim=32, n_layer=2, n_head=4, n_kv_head=2, seq_len=64),
    "large": ModelConfig(dim=64, n_layer=4, n_head=4, n_kv_head=2, seq_len=128),
    # seq_len 128, not 256: attention is most of a step at 256 on two CPU cores
    "medium": ModelConfig(dim=128, n_layer=4, n_head=4, n_kv_head=2, seq_len=128),
    # worth a GPU (--device cuda|mps, docs/gpu.md): ~32M params; on two CPU cores a step
    # of 16 sequences takes tens of seconds, so no test trains it
    "gpu": ModelConfig(dim=512, n_layer=8, n_head=8, n_kv_head=4, seq_len=512),
}



def scale_config(scale: str, rows: dict[str, dict] | None = None, *, train_attn: bool = True,
                 options: dict | None = None, **overrides) -> ModelConfig:
    """The arch of a named scale of the one scale table (the built-in rows, `rows` over them:
    params.yaml's `scales`), with per-knob overrides (None = keep) and the options."""
    table = {name: {k: getattr(cfg, k) for k in ARCH_KEYS} for name, cfg in SCALES.items()}
    for name, given in (rows or {}).items():
        table[name] = {**table.get(name, {}), **given}
    if scale not in table:
        raise SparkError(f"unknown scale {scale!r}; known: {', '.join(sorted(table))}"
                         f"{did_you_mean(scale, table)}")
    missing = [k for k in ARCH_KEYS if k not in table[scale]]
    if missing:
        raise SparkError(f"params: scales.{scale} is not a built-in scale, so it needs "
                         f"{', '.join(missing)} too")
    arch = {k: table[scale][k] for k in ARCH_KEYS}
    arch.update({k: v for k, v in overrides.items() if v is not None})
    return ModelConfig(**arch, train_attn=train_attn, **(options or {})).validate()

class Arch:
    """A model kind over one config: its rules (checked on construction), its shape table."""
    name: str  # eval.json's mode

    def __init__(self, cfg: ModelConfig):
        self.cfg = cfg
        self.check()

    def check(self) -> None:
        """Raise SparkError for a config this kind cannot build."""

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """The tensor table of docs/model.md, in a fixed order (the keys of params, grads,
        optimizer state and file)."""
        raise NotImplementedError

    @property
    def n_params(self) -> int:
        """Number of trainable scalars (all tensors in the weights file)."""
        return sum(math.prod(shape) for shape in self.param_shapes().values())

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token: 6 x params (nanoGPT's estimate_mfu) plus the kind's
        mixing of positions at the length processed (default seq_len)."""
        t = self.cfg.seq_len if seq_len is None else seq_len
        return 6 * self.n_params + self.mixing_flops_per_token(t)

    def mixing_flops_per_token(self, seq_len: int) -> int:
        """FLOPs per token that no weight accounts for."""
        return 0


BIGRAM = "spark.bigram.weight"  # the bigram option's table: (buckets, dim)
# value_residual's mixing weights: entry L - 1 is layer L's lambda, (n_layer - 1,)
VALUE_MIX = "spark.value_mix.weight"
# unet's skip weights: entry i scales block i's output into block n_layer-1-i, (n_layer // 2,)
SKIP = "spark.skip.weight"
LAYER_TENSORS = ("attn_norm", "q", "k", "v", "o", "mlp_norm", "mlp_gate", "mlp_up", "mlp_down")


def layer_names(L: int) -> dict[str, str]:
    """Short name -> safetensors name of layer L's tensors."""
    return {k: f"spark.layers.{L}.{k}.weight" for k in LAYER_TENSORS}


class AttentionArch(Arch):
    """Pre-norm decoder: embed -> n_layer x (GQA attention with RoPE, SwiGLU MLP)
    -> final norm -> lm_head."""
    name = "attn"

    def check(self) -> None:
        cfg = self.cfg
        if cfg.dim % cfg.n_head:
            raise SparkError(f"dim {cfg.dim} is not divisible by n_head {cfg.n_head}")
        if cfg.n_head % cfg.n_kv_head:
            raise SparkError(f"n_head {cfg.n_head} is not a multiple of n_kv_head {cfg.n_kv_head}")
        if cfg.head_dim % 2:
            raise SparkError(
                f"head dim {cfg.head_dim} (dim/n_head) is odd; RoPE needs an even head dim")

    def layer_shapes(self) -> dict[str, tuple[int, ...]]:
        """One decoder block's tensors by short name (every block has the same)."""
        d, kv = self.cfg.dim, self.cfg.kv_dim
        shapes = {"attn_norm": (d,), "q": (d, d), "k": (kv, d), "v": (kv, d), "o": (d, d),
                  "mlp_norm": (d,), "mlp_gate": (4 * d, d), "mlp_up": (4 * d, d),
                  "mlp_down": (d, 4 * d)}
        if self.cfg.mlp == "relu2":  # no gate
            del shapes["mlp_gate"]
        return shapes

    def outer_shapes(self) -> dict[str, tuple[int, ...]]:
        """The tensors outside the blocks, in table order: those before the blocks (the
        embeddings), then those after."""
        cfg = self.cfg
        d, v = cfg.dim, cfg.vocab
        shapes = {"spark.embed.weight": (v, d)}
        if cfg.bigram:
            shapes[BIGRAM] = (cfg.bigram, d)
        if cfg.value_residual:
            shapes[VALUE_MIX] = (cfg.n_layer - 1,)
        if cfg.unet:
            shapes[SKIP] = (cfg.n_layer // 2,)
        return {**shapes, "spark.final_norm.weight": (d,), "spark.lm_head.weight": (v, d)}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        layer, outer = self.layer_shapes(), self.outer_shapes()
        before = [name for name in ("spark.embed.weight", BIGRAM) if name in outer]
        blocks = [(name, layer[key]) for L in range(self.cfg.n_layer)
                  for key, name in layer_names(L).items() if key in layer]
        return dict([*((n, outer[n]) for n in before), *blocks,
                     *((n, s) for n, s in outer.items() if n not in before)])

    @property
    def n_params(self) -> int:
        """One block's shapes x n_layer: a billion-layer config is sized without its table."""
        per_layer = sum(math.prod(s) for s in self.layer_shapes().values())
        outer = sum(math.prod(s) for s in self.outer_shapes().values())
        return outer + self.cfg.n_layer * per_layer

    def mixing_flops_per_token(self, seq_len: int) -> int:
        """QK^T and att@V: 2 matmuls x 2 FLOPs x 3 (forward + backward) x dim x T a layer."""
        return 12 * self.cfg.n_layer * self.cfg.dim * seq_len


class MeanPoolArch(Arch):
    """Mean of the prompt's embeddings -> lm_head: one predicted byte per pair."""
    name = "pool"

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        d, v = self.cfg.dim, self.cfg.vocab
        return {"spark.embed.weight": (v, d), "spark.lm_head.weight": (v, d)}


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    return cfg.kind(cfg).param_shapes()


def n_params(cfg: ModelConfig) -> int:
    """The sum over param_shapes."""
    return cfg.kind(cfg).n_params


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> int:
    return cfg.kind(cfg).flops_per_token(seq_len)


def scale_names() -> str:
    """The built-in scale names, for help texts and messages."""
    return ", ".join(SCALES)
