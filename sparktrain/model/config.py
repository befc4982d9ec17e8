"""Model architecture: one typed config, the scale table, and the model it builds.

`build_model` is the one place that turns the config's `train_attn` into a
model kind; size, FLOPs and tensor names all come from that kind's shape table.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from sparktrain.errors import SparkError
from sparktrain.model.base import Model
from sparktrain.model.meanpool import MeanPool
from sparktrain.model.transformer import Transformer

VOCAB = 256
MAX_PARAMS = 200_000_000
MAX_SEQ_LEN = 4096


@dataclass(frozen=True)
class ModelConfig:
    dim: int = 32          # residual width
    n_layer: int = 2       # decoder blocks
    n_head: int = 4        # query heads
    n_kv_head: int = 2     # key/value heads (GQA: n_head must be a multiple)
    seq_len: int = 64      # context window in tokens
    vocab: int = VOCAB     # byte-level; 0xFD/0xFE/0xFF are BOS/SEP/EOS
    train_attn: bool = True  # False: the mean-pool fallback (embed + lm_head only)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    def validate(self) -> "ModelConfig":
        """Raise SparkError (one line) for an architecture we cannot build."""
        for f in ("dim", "n_layer", "n_head", "n_kv_head", "seq_len"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SparkError(f"{f} must be a positive integer, got {v!r}")
        if self.vocab != VOCAB:
            raise SparkError(f"vocab must be {VOCAB} (byte-level tokens), got {self.vocab}")
        if self.seq_len > MAX_SEQ_LEN:
            raise SparkError(f"seq_len {self.seq_len} is above the limit of {MAX_SEQ_LEN}")
        size = build_model(self).n_params  # the kind checks its own architecture
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


SCALES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(dim=32, n_layer=2, n_head=4, n_kv_head=2, seq_len=64),
    "large": ModelConfig(dim=64, n_layer=4, n_head=4, n_kv_head=2, seq_len=128),
}


def build_model(cfg: ModelConfig) -> Model:
    """The model kind of this config: the attention decoder, or the mean-pool fallback."""
    return Transformer(cfg) if cfg.train_attn else MeanPool(cfg)


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The tensor table of docs/training.md, in a fixed order: the names are the keys
    of the params dict, the grads dict, the optimizer state and the file."""
    return build_model(cfg).param_shapes()


def n_params(cfg: ModelConfig) -> int:
    """Number of trainable scalars: the sum over param_shapes."""
    return build_model(cfg).n_params


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> int:
    """Training FLOPs per token at sequence length seq_len (default cfg.seq_len)."""
    return build_model(cfg).flops_per_token(seq_len)
