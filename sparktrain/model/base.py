"""The interface training, eval and generation ask of a model kind (docs/model.md, "The
model", "Init"), and what it eats: right-padded batches of tokenised rows."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.model.config import BIGRAM, SKIP, VALUE_MIX, Arch

INIT_STD = 0.02
RESIDUAL_OUT = ("o.weight", "mlp_down.weight")
HEAD = "spark.lm_head.weight"  # zeroed too by init_out zero_head
# vectors that do not start at 1 (norms do): value_residual's lambdas start half a layer's
# own values, half the first's (the speedrun's); unet's skip weights at 0, so the model
# starts as the plain one (docs/model.md "Architecture options": 0 measured better than 1)
VECTOR_INIT = {VALUE_MIX: 0.5, SKIP: 0.0}


def init_rng(seed: int, salt: bytes = b"") -> np.random.Generator:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise SparkError(f"seed must be a non-negative integer, got {seed!r}")
    words = np.frombuffer(hashlib.sha256(salt).digest()[:16], dtype="<u4")
    return np.random.Generator(np.random.PCG64(
        np.random.SeedSequence([int(seed), *(int(w) for w in words)])))


class Model(Arch):
    """One model kind over one config: its architecture and the maths below. A kind sets
    `batch_type` (what `make_batch` builds) and `max_new_tokens` (None: no limit), and
    implements the methods that raise NotImplementedError."""
    batch_type: type
    max_new_tokens: int | None = None

    def init_params(self, seed: int, salt: bytes = b"", dtype=np.float32,
                    residual_out: str = "scaled") -> dict[str, np.ndarray]:
        """Fresh weights, keys and order of param_shapes() (docs/model.md, "Init")."""
        rng = init_rng(seed, salt)
        resid_std = INIT_STD / np.sqrt(2 * self.cfg.n_layer)
        params = {}
        for name, shape in self.param_shapes().items():
            if len(shape) == 1:
                params[name] = np.full(shape, VECTOR_INIT.get(name, 1.0), dtype=dtype)
                continue
            std = resid_std if name.endswith(RESIDUAL_OUT) else INIT_STD
            params[name] = (rng.standard_normal(shape) * std).astype(dtype)
            if (residual_out in ("zero", "zero_head") and name.endswith(RESIDUAL_OUT)) \
                    or (residual_out == "zero_head" and name == HEAD) \
                    or name == BIGRAM:  # the bigram table starts at zero: no noise added
                params[name] = np.zeros(shape, dtype=dtype)
        return params

    def make_batch(self, rows: Sequence):
        """Padded arrays of tokenised rows (train.data.Encoded), in this kind's layout."""
        return self.batch_type.from_rows(rows)

    def check_batch(self, batch) -> None:
        if not isinstance(batch, self.batch_type):
            raise TypeError(f"the {self.name} model needs a {self.batch_type.__name__}, "
                            f"got {type(batch).__name__}")

    def loss_and_grads(self, params, batch, denom: float | None = None,
                       drop=None) -> tuple[float, dict[str, np.ndarray]]:
        """Mean CE over the batch's counted targets (none: 0) and every tensor's gradient, in
        params' order; `denom` replaces the mean's denominator (a shard: the whole batch's);
        `drop` (model/dropout.py's Dropout): training's dropout, else None."""
        self.check_batch(batch)
        loss, cache = self._loss_forward(params, batch,
                                         mean_denom if denom is None else lambda w: denom, drop)
        grads = self._loss_backward(cache)
        return loss, {name: grads[name] for name in params}

    def scores_and_grads(self, params, batch) -> tuple:
        """(each scored row's CE in nats (N,), their weights (N,), where the params live; the
        gradient of the weighted mean): a token's score and the step it informs, from one
        forward (eval/dynamic.py)."""
        self.check_batch(batch)
        _, cache = self._loss_forward(params, batch, mean_denom)
        nll, weights = cache.ce.nll, cache.ce.weights   # the backward reuses probs, not these
        grads = self._loss_backward(cache)
        return nll, weights, {name: grads[name] for name in params}

    def batch_loss(self, params, batch) -> tuple[float, int]:
        """Forward only: (sum of CE over counted targets, accumulated in float64; count)."""
        self.check_batch(batch)
        loss, _ = self._loss_forward(params, batch, lambda weights: 1.0)  # the sum itself
        return loss, batch.n_counted

    def _loss_forward(self, params, batch, denom_of, drop=None):
        """(CE summed over the counted targets / denom_of(their weights), the cache); `drop`
        as loss_and_grads's."""
        raise NotImplementedError

    def _loss_backward(self, cache) -> dict[str, np.ndarray]:
        """The gradient of every tensor from _loss_forward's cache."""
        raise NotImplementedError

    def scored_logits(self, params, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Forward only: (logits (B, T, V), targets (B, T), mask (B, T)) where the loss can
        score, mask 1.0 where it does (T = 1 for one target a row)."""
        raise NotImplementedError

    def next_logits(self, params, windows: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Logits after each window: windows (A, T) right-padded, lens (A,) -> (A, V)."""
        raise NotImplementedError


def mean_denom(weights) -> float:
    """The mean's denominator: the counted weight, at least 1 (an empty batch has loss 0)."""
    return max(float(weights.sum(dtype=np.float64)), 1.0)


# right padding: its value never matters (mask 0, causal attention); 0xFF is EOS
PAD = 0xFF


def right_pad(seqs: Sequence) -> np.ndarray:
    """(len(seqs), longest) int64: row b holds seqs[b], then PAD."""
    grid = np.full((len(seqs), max(len(s) for s in seqs)), PAD, dtype=np.int64)
    for b, s in enumerate(seqs):
        grid[b, :len(s)] = s
    return grid


@dataclass(frozen=True)
class TokenBatch:
    """Attention model: teacher-forced next-byte prediction. inputs, targets (B, T) int64;
    mask (B, T) float: 1.0 where the target counts (completion or EOS), 0.0 on prompt
    targets and right padding."""
    inputs: np.ndarray
    targets: np.ndarray
    mask: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence) -> "TokenBatch":
        """Inputs tokens[:-1], targets tokens[1:], right-padded to the longest row."""
        if not rows:
            raise ValueError("a token batch needs at least one row")
        inputs = right_pad([r.tokens[:-1] for r in rows])   # (B, T)
        targets = right_pad([r.tokens[1:] for r in rows])   # (B, T)
        mask = np.zeros(inputs.shape, dtype=np.float32)     # (B, T)
        for b, r in enumerate(rows):
            mask[b, :len(r.tokens) - 1] = r.mask
        return cls(inputs, targets, mask)

    @property
    def n_counted(self) -> int:
        return int(self.mask.sum())

    @property
    def n_tokens(self) -> int:
        """Input positions that are real tokens: each row up to its last counted target."""
        m = self.mask
        last = m.shape[1] - np.argmax(m[:, ::-1] > 0, axis=1)           # (B,)
        return int(np.where(m.any(axis=1), last, 0).sum())

    @property
    def width(self) -> int:
        """T, the padded length every row is processed at."""
        return int(self.inputs.shape[1])


@dataclass(frozen=True)
class PoolBatch:
    """Mean-pool fallback: one target per pair. context (B, T) int64 = [BOS] + prompt + [SEP],
    right padded; context_mask (B, T) float, 1.0 on real tokens; target (B,) the first byte."""
    context: np.ndarray
    context_mask: np.ndarray
    target: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence) -> "PoolBatch":
        """Prompt contexts right-padded to the longest, one target per row."""
        if not rows:
            raise ValueError("a pool batch needs at least one row")
        context = right_pad([r.context for r in rows])     # (B, T)
        context_mask = np.zeros(context.shape, dtype=np.float32)  # (B, T)
        for b, r in enumerate(rows):
            context_mask[b, :len(r.context)] = 1.0
        target = np.array([r.first_target for r in rows], dtype=np.int64)  # (B,)
        return cls(context, context_mask, target)

    @property
    def n_counted(self) -> int:
        return int(self.target.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.context_mask.sum())

    @property
    def width(self) -> int:
        return int(self.context.shape[1])
