"""Model architecture: one typed config, the scale table, size and FLOP counts."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from sparktrain.errors import SparkError

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
        if self.train_attn:
            if self.dim % self.n_head:
                raise SparkError(f"dim {self.dim} is not divisible by n_head {self.n_head}")
            if self.n_head % self.n_kv_head:
                raise SparkError(
                    f"n_head {self.n_head} is not a multiple of n_kv_head {self.n_kv_head}")
            if self.head_dim % 2:
                raise SparkError(
                    f"head dim {self.head_dim} (dim/n_head) is odd; RoPE needs an even head dim")
        if n_params(self) > MAX_PARAMS:
            raise SparkError(
                f"model would have {n_params(self):,} parameters, above the limit of {MAX_PARAMS:,}")
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


def n_params(cfg: ModelConfig) -> int:
    """Number of trainable scalars (all tensors in the weights file)."""
    d = cfg.dim
    embed_head = 2 * cfg.vocab * d
    if not cfg.train_attn:
        return embed_head
    kv = cfg.n_kv_head * (d // max(cfg.n_head, 1))
    per_layer = 2 * d + 2 * d * d + 2 * kv * d + 3 * 4 * d * d
    return embed_head + d + cfg.n_layer * per_layer


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> int:
    """Training FLOPs per token: 6 x params plus attention (nanoGPT's estimate_mfu).

    Attention adds 12 * n_layer * dim * T per token (QK^T and att@V, forward
    and backward), with T the sequence length actually processed.
    """
    t = cfg.seq_len if seq_len is None else seq_len
    attn = 12 * cfg.n_layer * cfg.dim * t if cfg.train_attn else 0
    return 6 * n_params(cfg) + attn


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The tensor table of docs/training.md, in a fixed order: the names are the keys
    of the params dict, the grads dict, the optimizer state and the file."""
    d, v = cfg.dim, cfg.vocab
    shapes: dict[str, tuple[int, ...]] = {"spark.embed.weight": (v, d)}
    if cfg.train_attn:
        kv = cfg.kv_dim
        for L in range(cfg.n_layer):
            p = f"spark.layers.{L}."
            shapes[p + "attn_norm.weight"] = (d,)
            shapes[p + "q.weight"] = (d, d)
            shapes[p + "k.weight"] = (kv, d)
            shapes[p + "v.weight"] = (kv, d)
            shapes[p + "o.weight"] = (d, d)
            shapes[p + "mlp_norm.weight"] = (d,)
            shapes[p + "mlp_gate.weight"] = (4 * d, d)
            shapes[p + "mlp_up.weight"] = (4 * d, d)
            shapes[p + "mlp_down.weight"] = (d, 4 * d)
        shapes["spark.final_norm.weight"] = (d,)
    shapes["spark.lm_head.weight"] = (v, d)
    return shapes
