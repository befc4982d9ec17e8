"""The sampling core (eval/generate.py makes the contexts and the text): greedy or
temperature/top-k for a batch of contexts, one forward of the whole right-padded window per
new token, no KV cache; the caller passes `eos`: this floor knows no tokenizer."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from sparktrain.model.base import right_pad
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig

MAX_NEW = 4096  # most new tokens one prompt may ask for: a model that never emits EOS stops here

MIN_TEMPERATURE = 1e-6  # below: greedy (logits / T would overflow float64)


def pick_next(logits: np.ndarray, temperature: float, top_k: int,
              rng: np.random.Generator | None) -> np.ndarray:
    """logits (A, V) -> next token ids (A,): argmax at T=0 (and below MIN_TEMPERATURE,
    where dividing by T overflows), else a seeded draw; a row whose scaled logits are
    not all finite is taken greedily too: never a draw from a NaN distribution."""
    greedy = np.argmax(logits, axis=-1).astype(np.int64)          # first max on ties
    if temperature < MIN_TEMPERATURE:
        return greedy
    with np.errstate(over="ignore", invalid="ignore"):
        z = logits.astype(np.float64) / temperature                # (A, V)
    finite = np.isfinite(z).all(axis=-1)                           # (A,)
    if not finite.all():
        z = np.where(finite[:, None], z, 0.0)
    if 0 < top_k < z.shape[-1]:
        kth = np.sort(z, axis=-1)[:, -top_k][:, None]              # (A, 1)
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)                             # (A, V)
    u = rng.random(z.shape[0])[:, None]                            # (A, 1)
    idx = (np.cumsum(p, axis=-1) < u).sum(axis=-1)                 # inverse CDF
    idx = np.minimum(idx, z.shape[-1] - 1).astype(np.int64)
    return np.where(finite, idx, greedy)


def generate_tokens(params, cfg: ModelConfig, contexts: Sequence[np.ndarray],
                    caps: Sequence[int], *, temperature: float = 0.0, top_k: int = 0,
                    rng: np.random.Generator | None = None, eos: int) -> list[list[int]]:
    """New tokens for each context (`eos` not included), at most caps[i] (and the kind's
    max_new_tokens); the window slides once a row is longer than seq_len."""
    model = build_model(cfg)
    seqs = [list(int(t) for t in c) for c in contexts]
    out: list[list[int]] = [[] for _ in seqs]
    limit = model.max_new_tokens
    caps = [int(c) if limit is None else min(int(c), limit) for c in caps]
    active = [i for i, c in enumerate(caps) if c > 0]
    while active:
        windows = [seqs[i][-cfg.seq_len:] for i in active]
        lens = np.array([len(w) for w in windows])                 # (A,)
        last = model.next_logits(params, right_pad(windows), lens)  # (A, V)
        nxt = pick_next(last, temperature, top_k, rng)             # (A,)
        still = []
        for i, tok in zip(active, nxt.tolist()):
            if tok == eos:
                continue
            seqs[i].append(tok)
            out[i].append(tok)
            if len(out[i]) < caps[i]:
                still.append(i)
        active = still
    return out
