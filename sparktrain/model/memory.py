"""The memory a run needs, estimated from the shapes alone, and the cap it must fit under
(SPARK_MAX_MEMORY_MB, the machine's memory, `ulimit -v`): a run that would not fit is
refused in one line before anything is built (docs/model.md "Memory")."""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from sparktrain.core.errors import SparkError
from sparktrain.model.config import ModelConfig

F32 = 4
BASE_BYTES = 96 << 20     # python + numpy + safetensors + pydantic, measured ~80-95 MiB
ACT_PER_LAYER = 26        # floats per token and dim a block keeps for its backward
ENV = "SPARK_MAX_MEMORY_MB"


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


def estimate(cfg: ModelConfig, rows: int, moments: int = 1, train: bool = True,
             seq_len: int | None = None) -> Estimate:
    """Bytes a step over `rows` sequences of `seq_len` (default cfg.seq_len) tokens needs,
    its optimizer keeping `moments` copies of the weights (params.py OPTIMIZER_MOMENTS; 0
    when forward-only or plain SGD)."""
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
    copies = (2 + moments) if train else 0
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


def check_fits(what: str, cfg: ModelConfig, rows: int, moments: int = 1,
               train: bool = True) -> Estimate:
    """The estimate, or one line saying it is above the cap (with both numbers)."""
    shape = (f"dim {cfg.dim}, {cfg.n_layer} layers, vocab {cfg.vocab}, "
             f"{rows:,} x {cfg.seq_len} tokens a {'micro-step' if train else 'batch'}")
    return _within_cap(what, estimate(cfg, rows, moments, train), shape,
                       f"; use a smaller scale or batch (or set {ENV})")


def weights_fits(what: str, cfg: ModelConfig, copies: int) -> Estimate:
    """A command that holds `copies` of the weights at once (import: the file's
    tensors, the converted ones and the bytes written) and no activations."""
    params = estimate(cfg, 0, 0, train=False).params
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
