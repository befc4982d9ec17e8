"""Sampling from a trained model: greedy or temperature/top-k, batched.

Prompts become [BOS] + prompt + [SEP], cut to the last seq_len tokens like
training data. All prompts of a batch advance together: one forward of the
whole window per new token, each row reading the logits at its own last
position (rows are right-padded, so padding never reaches a real position
through the causal mask). No KV cache: the training forward is the one we
trust, and the model is tiny.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from sparktrain.errors import SparkError
from sparktrain.model.batch import PAD
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig
from sparktrain.data.pairs import EOS, prompt_tokens
from sparktrain.data.tokenizer import BYTES

GEN_BATCH = 64
MAX_NEW = 4096  # most new bytes one prompt may ask for: a model that never emits EOS stops here


def prompt_context(prompt: str, seq_len: int, tok=BYTES) -> tuple[np.ndarray, bool]:
    """([BOS] + prompt + [SEP] cut to the last seq_len tokens, whether it was cut),
    in the ids of a pairs job's tokenizer `tok` (bytes by default)."""
    if not isinstance(prompt, str) or not prompt:
        raise SparkError("prompt is empty; give the text to continue")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as err:
        raise SparkError(f"prompt is not valid UTF-8 text (character {err.start}); "
                         "byte tokens are the UTF-8 bytes of text") from None
    tokens = prompt_tokens(prompt, tok)
    return tokens[-seq_len:], len(tokens) > seq_len


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
                    rng: np.random.Generator | None = None, eos: int = EOS) -> list[list[int]]:
    """New tokens for each context (`eos` not included), at most caps[i] of them.

    The window slides once a row is longer than seq_len. A model kind with a
    max_new_tokens (the mean-pool model: 1) stops there.
    """
    model = build_model(cfg)
    seqs = [list(int(t) for t in c) for c in contexts]
    out: list[list[int]] = [[] for _ in seqs]
    limit = model.max_new_tokens
    caps = [int(c) if limit is None else min(int(c), limit) for c in caps]
    active = [i for i, c in enumerate(caps) if c > 0]
    while active:
        windows = [seqs[i][-cfg.seq_len:] for i in active]
        lens = np.array([len(w) for w in windows])                 # (A,)
        grid = np.full((len(active), int(lens.max())), PAD, dtype=np.int64)  # (A, T)
        for r, w in enumerate(windows):
            grid[r, :len(w)] = w
        last = model.next_logits(params, grid, lens)              # (A, V)
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


def decode(tokens: Sequence[int]) -> str:
    return bytes(tokens).decode("utf-8", errors="replace")


def generate(params, cfg: ModelConfig, prompts: Sequence[str], *, max_new: int = 64,
             temperature: float = 0.0, top_k: int = 0, seed: int = 0,
             tokenizer=BYTES) -> list[str]:
    """Complete each prompt of a pairs model; stops at its EOS or after max_new tokens
    (bytes, or the ids of the job's BPE `tokenizer`)."""
    _check_sampling(max_new, temperature, top_k, seed)
    contexts = [prompt_context(p, cfg.seq_len, tokenizer)[0] for p in prompts]
    return _sample(params, cfg, contexts, max_new, temperature, top_k, seed, tokenizer.eos,
                   tokenizer.completion_text)


def continue_text(params, cfg: ModelConfig, tokenizer, prompts: Sequence[str], *,
                  max_new: int = 64, temperature: float = 0.0, top_k: int = 0,
                  seed: int = 0) -> list[str]:
    """A corpus model continues text as it was trained on it: [BOS] + the prompt's
    tokens (no SEP), cut to the last seq_len, decoded with the job's tokenizer;
    stops at its EOS (the end of a file) or after max_new tokens."""
    _check_sampling(max_new, temperature, top_k, seed)
    contexts = [corpus_context(tokenizer, p, cfg.seq_len)[0] for p in prompts]
    return _sample(params, cfg, contexts, max_new, temperature, top_k, seed, tokenizer.eos,
                   tokenizer.decode)


def corpus_context(tokenizer, prompt: str, seq_len: int) -> tuple[np.ndarray, bool]:
    """([BOS] + tokens of the prompt, cut to the last seq_len tokens; whether it was cut)."""
    prompt_context(prompt, seq_len)  # the same checks: not empty, valid UTF-8
    tokens = np.concatenate([[tokenizer.bos], tokenizer.encode(prompt)]).astype(np.int64)
    return tokens[-seq_len:], len(tokens) > seq_len


def _sample(params, cfg, contexts, max_new, temperature, top_k, seed, eos, decode_fn):
    rng = np.random.default_rng(seed) if temperature > 0 else None
    texts = []
    for start in range(0, len(contexts), GEN_BATCH):
        chunk = contexts[start:start + GEN_BATCH]
        new = generate_tokens(params, cfg, chunk, [max_new] * len(chunk),
                              temperature=temperature, top_k=top_k, rng=rng, eos=eos)
        texts.extend(decode_fn(t) for t in new)
    return texts


def _check_sampling(max_new: int, temperature: float, top_k: int, seed: int) -> None:
    if not 0 <= max_new <= MAX_NEW:
        raise SparkError(f"max_new must be in [0, {MAX_NEW}], got {max_new}")
    if seed < 0:
        raise SparkError(f"seed must be >= 0, got {seed}")
    if temperature < 0 or not np.isfinite(temperature):
        raise SparkError(f"temperature must be >= 0, got {temperature}")
    if top_k < 0:
        raise SparkError(f"top_k must be >= 0, got {top_k}")
