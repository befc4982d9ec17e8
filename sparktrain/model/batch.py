"""What the model eats: padded integer batches. Built by sparktrain.train.data."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenBatch:
    """Attention model: teacher-forced next-byte prediction.

    inputs, targets: (B, T) int64; mask: (B, T) float, 1.0 where the target is
    a completion byte or EOS (counted in the loss), 0.0 on prompt targets and
    on right padding. Padding sits at the end of a row, so causal attention
    never lets it change a counted position.
    """
    inputs: np.ndarray
    targets: np.ndarray
    mask: np.ndarray

    @property
    def n_counted(self) -> int:
        return int(self.mask.sum())


@dataclass(frozen=True)
class PoolBatch:
    """Mean-pool fallback: one target per pair.

    context: (B, T) int64 = [BOS] + prompt + [SEP] (after truncation), right
    padded; context_mask: (B, T) float, 1.0 on real tokens; target: (B,) int64,
    the first completion byte.
    """
    context: np.ndarray
    context_mask: np.ndarray
    target: np.ndarray

    @property
    def n_counted(self) -> int:
        return int(self.target.shape[0])
