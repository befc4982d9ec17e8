"""What the model eats: padded integer batches of tokenised rows (anything with the
fields of sparktrain.data.pairs.Encoded: tokens, mask, context, first_target)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# right padding: its value never matters (mask 0, causal attention); 0xFF is EOS
PAD = 0xFF


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
        T = max(len(r.tokens) - 1 for r in rows)
        B = len(rows)
        inputs = np.full((B, T), PAD, dtype=np.int64)   # (B, T)
        targets = np.full((B, T), PAD, dtype=np.int64)  # (B, T)
        mask = np.zeros((B, T), dtype=np.float32)       # (B, T)
        for b, r in enumerate(rows):
            n = len(r.tokens) - 1
            inputs[b, :n] = r.tokens[:-1]
            targets[b, :n] = r.tokens[1:]
            mask[b, :n] = r.mask
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
        T = max(len(r.context) for r in rows)
        B = len(rows)
        context = np.full((B, T), PAD, dtype=np.int64)     # (B, T)
        context_mask = np.zeros((B, T), dtype=np.float32)  # (B, T)
        for b, r in enumerate(rows):
            context[b, :len(r.context)] = r.context
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
