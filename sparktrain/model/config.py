"""The typed config, the scale table, the two model kinds' rules and shape table (sizes,
FLOPs, tensor names), and the memory a run needs (docs/model.md, "Tensors"; docs/training.md, "Memory").
Nothing but the config: checking params never loads the model code, which extends these."""
from __future__ import annotations

import math
import os
import resource
from dataclasses import asdict, dataclass, fields

from sparktrain.vocab import BYTE_VOCAB, MAX_VOCAB
from sparktrain.core.errors import SparkError
from sparktrain.core.values import is_count, is_number

VOCAB = BYTE_VOCAB
MAX_PARAMS = 200_000_000
MAX_SEQ_LEN = 4096
MAX_LAYERS = 1024  # the shape table has 9 tensors a layer: keep it a table, not a flood
MAX_SHARDS = 65_536  # a step's row shards (model/parallel.py): a shard is at least a row
# where a model runs: params.yaml's step.device, `--device` (model/device.py resolves one)
DEVICES = ("cpu", "cuda", "mps", "auto")


@dataclass(frozen=True)
class ModelConfig:
    dim: int = 32          # residual width
    n_layer: int = 2       # decoder blocks
    n_head: int = 4        # query heads
    n_kv_head: int = 2     # key/value heads (GQA: n_head must be a multiple)
    seq_len: int = 64      # context window in tokens
    vocab: int = VOCAB     # from the tokenizer: 256 bytes (0xFD/0xFE/0xFF the specials) or BPE
    train_attn: bool = True  # False: the mean-pool fallback (embed + lm_head only)
    # Opt-in options of the attention model (docs/model.md "Architecture options"); a
    # config records them only when they differ from these defaults (to_dict)
    mlp: str = "swiglu"    # "relu2": relu(h @ Wup.T)^2 @ Wdown.T, two matrices, no gate
    qk_norm: bool = False  # q and k rms-normalised per head (no weight) before the scores
    logit_cap: float = 0.0  # > 0: logits = cap * tanh(logits / cap); 0 = off
    bigram: int = 0        # > 0: buckets of a hashed (previous, current) token embedding
    value_residual: bool = False  # layers 1.. mix the first layer's values into their own
    unet: bool = False     # block i's output added (weighted) to block n_layer-1-i's input

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
OPTION_DEFAULTS = {"mlp": "swiglu", "qk_norm": False, "logit_cap": 0.0, "bigram": 0,
                   "value_residual": False, "unet": False}
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


F32 = 4
BASE_BYTES = 96 << 20     # python + numpy + safetensors + pydantic, measured ~80-95 MiB
ACT_PER_LAYER = 26        # floats per token and dim a block keeps for its backward
ENV = "SPARK_MAX_MEMORY_MB"
# step.optimizer's choices, the one list of them (params.py's schema, train/optim.py's
# classes, `spark bench --optimizer`), and the moments each keeps per parameter (at most)
OPTIMIZER_COPIES = {"sgd": 1, "adamw": 2, "muon": 2, None: 0}
OPTIMIZERS = tuple(name for name in OPTIMIZER_COPIES if name is not None)
# the step knobs only some optimizers read (the others: every optimizer's); set for another
# optimizer they are refused, and `spark bench --optimizer` puts them back to their defaults
KNOB_READERS = {"adam_lr": ("muon",), "muon_ns": ("muon",), "normuon": ("muon",),
                "weight_decay": ("adamw", "muon"), "embed_lr": ("adamw", "muon")}


@dataclass(frozen=True)
class Estimate:
    params: int         # bytes of the weights
    optimizer: int      # gradients, start copy and optimizer moments
    activations: int    # one micro-step (or one forward batch)
    base: int = BASE_BYTES

    @property
    def total(self) -> int:
        return self.params + self.optimizer + self.activations + self.base

    def describe(self) -> str:
        return (f"{gib(self.total)} (params {gib(self.params)}, optimizer state "
                f"{gib(self.optimizer)}, activations {gib(self.activations)})")


def gib(n: int) -> str:
    return f"{n / (1 << 30):,.2f} GiB" if n >= 1 << 28 else f"{n / (1 << 20):,.1f} MiB"


def estimate(cfg: ModelConfig, rows: int, optimizer: str | None = "sgd",
             train: bool = True, seq_len: int | None = None) -> Estimate:
    """Bytes a step over `rows` sequences of `seq_len` (default cfg.seq_len) tokens needs;
    optimizer: "sgd", "adamw", "muon", or None (no moments: forward-only or plain SGD)."""
    T = cfg.seq_len if seq_len is None else seq_len
    P = cfg.kind(cfg).n_params            # arithmetic: see AttentionArch.n_params
    tokens = rows * T
    if cfg.train_attn:
        per_layer = tokens * ACT_PER_LAYER * cfg.dim + 2 * rows * cfg.n_head * T * T
        trunk = cfg.n_layer * per_layer if train else 2 * per_layer
    else:
        trunk = tokens * cfg.dim if train else rows * cfg.dim
        tokens = rows  # the mean-pool model scores one position a row
    logits = 3 * tokens * cfg.vocab if train else 2 * tokens * cfg.vocab
    activations = (trunk + logits) * F32
    copies = (2 + OPTIMIZER_COPIES.get(optimizer, 1)) if train else 0
    return Estimate(params=P * F32, optimizer=copies * P * F32, activations=activations)


def memory_cap() -> tuple[int, str]:
    """(bytes, where the number comes from): SPARK_MAX_MEMORY_MB, else the smaller of
    the machine's memory and the address-space limit."""
    text = os.environ.get(ENV, "").strip()
    if text:
        try:
            mb = float(text)
        except ValueError:
            mb = -1.0
        if not 0 < mb < 1 << 40:
            raise SparkError(f"{ENV}={text!r} is not a positive number of MiB")
        return int(mb * (1 << 20)), ENV
    source = "the machine's memory"
    try:
        cap = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        cap = 1 << 40
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < cap:
        cap, source = soft, "the address-space limit (ulimit -v)"
    return cap, source


def check_fits(what: str, cfg: ModelConfig, rows: int, optimizer: str | None = "sgd",
               train: bool = True) -> Estimate:
    """The estimate, or one line saying it is above the cap (with both numbers)."""
    shape = (f"dim {cfg.dim}, {cfg.n_layer} layers, vocab {cfg.vocab}, "
             f"{rows:,} x {cfg.seq_len} tokens a {'micro-step' if train else 'batch'}")
    return _within_cap(what, estimate(cfg, rows, optimizer, train), shape,
                       f"; use a smaller scale or batch (or set {ENV})")


def weights_fits(what: str, cfg: ModelConfig, copies: int) -> Estimate:
    """A command that holds `copies` of the weights at once (import: the file's
    tensors, the converted ones and the bytes written) and no activations."""
    params = estimate(cfg, 0, None, train=False).params
    est = Estimate(params=params, optimizer=(copies - 1) * params, activations=0)
    return _within_cap(what, est, f"dim {cfg.dim}, {cfg.n_layer} layers, vocab {cfg.vocab}",
                       f" (set {ENV} to change the cap)")


def _within_cap(what: str, est: Estimate, shape: str, advice: str) -> Estimate:
    """est, or one line saying it is above the cap (with both numbers)."""
    cap, source = memory_cap()
    if est.total > cap:
        raise SparkError(f"{what} would need an estimated {est.describe()} for {shape}, "
                         f"above the {gib(cap)} of {source}{advice}")
    return est


def step_fits(what: str, cfg: ModelConfig, step, rows_bound: int | None = None,
              loss_rows: int = 0) -> Estimate:
    """check_fits for a training step: the larger of batch_size and the loop's loss batches
    (`loss_rows`), at most rows_bound (the dataset's rows when known)."""
    rows = max(step.batch_size, loss_rows)
    rows = rows if rows_bound is None else max(1, min(rows, rows_bound))
    optimizer = step.optimizer if (step.optimizer != "sgd" or step.momentum) else None
    return check_fits(what, cfg, rows, optimizer)


def line_count(path, limit: int = 1 << 31) -> int | None:
    """Newlines (+1) of a readable regular file, read in chunks (a dataset's row bound);
    else None."""
    if not os.path.isfile(path):  # a FIFO would block the open
        return None
    try:
        with open(path, "rb") as f:
            count = 1
            while chunk := f.read(1 << 22):
                count += chunk.count(b"\n")
                if count > limit:
                    break
            return count
    except OSError:
        return None
