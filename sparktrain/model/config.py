"""Model architecture: the typed config, the scale table, and the two model kinds as the
config sees them (their rules and their one shape table, from which sizes, FLOPs and
tensor names come). It needs nothing but the config: checking params never loads the
model code, whose kinds extend these classes."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from sparktrain.vocab import BYTE_VOCAB, MAX_VOCAB
from sparktrain.core.errors import SparkError

VOCAB = BYTE_VOCAB
MAX_PARAMS = 200_000_000
MAX_SEQ_LEN = 4096
MAX_LAYERS = 1024  # the shape table has 9 tensors a layer: keep it a table, not a flood


@dataclass(frozen=True)
class ModelConfig:
    dim: int = 32          # residual width
    n_layer: int = 2       # decoder blocks
    n_head: int = 4        # query heads
    n_kv_head: int = 2     # key/value heads (GQA: n_head must be a multiple)
    seq_len: int = 64      # context window in tokens
    vocab: int = VOCAB     # from the tokenizer: 256 bytes (0xFD/0xFE/0xFF the specials) or BPE
    train_attn: bool = True  # False: the mean-pool fallback (embed + lm_head only)

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
        for f in ("dim", "n_layer", "n_head", "n_kv_head", "seq_len"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SparkError(f"{f} must be a positive integer, got {v!r}")
        if isinstance(self.vocab, bool) or not isinstance(self.vocab, int) \
                or not VOCAB <= self.vocab <= MAX_VOCAB:
            raise SparkError(f"vocab must be an integer in [{VOCAB}, {MAX_VOCAB}] (bytes, or "
                             f"a BPE tokenizer's vocab), got {self.vocab!r}")
        if self.n_layer > MAX_LAYERS:
            raise SparkError(f"n_layer {self.n_layer} is above the limit of {MAX_LAYERS}")
        if self.seq_len > MAX_SEQ_LEN:
            raise SparkError(f"seq_len {self.seq_len} is above the limit of {MAX_SEQ_LEN}")
        size = self.kind(self).n_params  # the kind checks its own rules first
        if size > MAX_PARAMS:
            raise SparkError(
                f"model would have {size:,} parameters, above the limit of {MAX_PARAMS:,}")
        return self

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise SparkError(f"unknown arch key(s): {', '.join(unknown)}")
        return cls(**d)


# a scale's keys: vocab comes from the tokenizer, train_attn from the step knobs
ARCH_KEYS = tuple(f.name for f in fields(ModelConfig) if f.name not in ("vocab", "train_attn"))

SCALES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(dim=32, n_layer=2, n_head=4, n_kv_head=2, seq_len=64),
    "large": ModelConfig(dim=64, n_layer=4, n_head=4, n_kv_head=2, seq_len=128),
    # seq_len 128, not 256: attention is most of a step at 256 on two CPU cores
    "medium": ModelConfig(dim=128, n_layer=4, n_head=4, n_kv_head=2, seq_len=128),
    # worth a GPU (--device cuda|mps, docs/gpu.md): ~32M params; on two CPU cores a step
    # of 16 sequences takes tens of seconds, so no test trains it
    "gpu": ModelConfig(dim=512, n_layer=8, n_head=8, n_kv_head=4, seq_len=512),
}


class Arch:
    """A model kind over one config: its rules (checked on construction), its shape table."""
    name: str  # eval.json's mode

    def __init__(self, cfg: ModelConfig):
        self.cfg = cfg
        self.check()

    def check(self) -> None:
        """Raise SparkError for a config this kind cannot build."""

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """The tensor table of docs/training.md, in a fixed order (the keys of params, grads,
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
        return {"attn_norm": (d,), "q": (d, d), "k": (kv, d), "v": (kv, d), "o": (d, d),
                "mlp_norm": (d,), "mlp_gate": (4 * d, d), "mlp_up": (4 * d, d),
                "mlp_down": (d, 4 * d)}

    def outer_shapes(self) -> dict[str, tuple[int, ...]]:
        d, v = self.cfg.dim, self.cfg.vocab
        return {"spark.embed.weight": (v, d), "spark.final_norm.weight": (d,),
                "spark.lm_head.weight": (v, d)}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        layer, outer = self.layer_shapes(), self.outer_shapes()
        shapes: dict[str, tuple[int, ...]] = {"spark.embed.weight": outer["spark.embed.weight"]}
        for L in range(self.cfg.n_layer):
            for key, name in layer_names(L).items():
                shapes[name] = layer[key]
        shapes["spark.final_norm.weight"] = outer["spark.final_norm.weight"]
        shapes["spark.lm_head.weight"] = outer["spark.lm_head.weight"]
        return shapes

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
