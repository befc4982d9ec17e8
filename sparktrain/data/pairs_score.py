"""A pairs model's held-out metrics (docs/outputs.md "eval.json"): teacher-forced sums per row
and greedy exact match, added in file order in float64 (same weights and rows, same dict)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sparktrain.data.base import bits_per_byte
from sparktrain.data.tokenizer import BYTES
from sparktrain.core.errors import SparkError
from sparktrain.data.tasks import COPY_PREFIX, family_of
from sparktrain.model.base import Model
from sparktrain.model.build import build_model
from sparktrain.model.sampling import MAX_NEW, generate_tokens
from sparktrain.model.config import ModelConfig
from sparktrain.model.memory import check_fits
from sparktrain.data.pairs import Encoded, Pair, encode_pair

SIG_DIGITS = 8


@dataclass
class _RowStats:
    """Teacher-forced sums per row, (n,) arrays in file order."""
    ce: np.ndarray          # sum of CE over the row's counted targets (float64)
    counted: np.ndarray     # number of counted targets
    correct: np.ndarray     # counted targets whose argmax was right
    copy_correct: np.ndarray  # right completion tokens (EOS excluded)
    copy_total: np.ndarray    # completion tokens seen (EOS excluded)
    text_bytes: np.ndarray    # bytes of text the counted targets stand for


def evaluate(params, cfg: ModelConfig, pairs: Sequence[Pair], *, batch_size: int = 64,
             max_new: int | None = None, n_samples: int = 3, tokenizer=BYTES) -> dict:
    """Metrics over `pairs` in `tokenizer`'s ids (a BPE adds the completions' `bpb`); max_new
    None caps a generation at len(expected)+1 tokens, the most that can still match."""
    if not pairs:
        raise SparkError("no rows to evaluate")
    if batch_size < 1:
        raise SparkError(f"batch_size must be at least 1, got {batch_size}")
    if max_new is not None and not 1 <= max_new <= MAX_NEW:
        raise SparkError(f"max_new must be in [1, {MAX_NEW}], got {max_new}")
    check_fits("evaluation", cfg, max(1, min(batch_size, len(pairs))), moments=0,
               train=False)
    model = build_model(cfg)
    encoded = [encode_pair(p, cfg.seq_len, tokenizer) for p in pairs]
    eos, byte_lengths = tokenizer.eos, tokenizer.byte_lengths()
    starts = range(0, len(pairs), batch_size)
    stats = _RowStats(*(np.concatenate(col) for col in zip(*[
        _row_stats(params, model, encoded[i:i + batch_size], eos, byte_lengths) for i in starts])))
    generated = []  # greedy, each capped at max_new or len(expected) + 1
    for i in starts:
        caps = [max_new or len(p.completion.encode("utf-8")) + 1 for p in pairs[i:i + batch_size]]
        generated += generate_tokens(params, cfg, [e.context for e in encoded[i:i + batch_size]],
                                     caps, eos=eos)
    texts = [tokenizer.completion_text(g) for g in generated]
    match = np.array([tokenizer.is_exactly(g, p.completion) for g, p in zip(generated, pairs)],
                     dtype=np.float64)
    copy_rows = np.array([p.prompt.startswith(COPY_PREFIX) for p in pairs])

    result = _summary(stats, match, np.ones(len(pairs), dtype=bool))
    copy_total = stats.copy_total[copy_rows].sum()
    recall = _r(stats.copy_correct[copy_rows].sum() / copy_total) if copy_total else None
    result.update(mode=model.name, n_truncated=sum(e.truncated for e in encoded),
                  n_copy_probes=int(copy_rows.sum()), copy_recall=recall, families={}, samples=[])
    if tokenizer.kind != "byte":  # a byte model's metrics are those of before tokenizers
        result.update(bpb=_r(bits_per_byte(float(stats.ce.sum()), int(stats.text_bytes.sum()))),
                      tokenizer=tokenizer.kind, vocab=tokenizer.vocab)
    families = [family_of(p.prompt, p.family) for p in pairs]
    for name in sorted(set(families)):
        rows = np.array([f == name for f in families])
        result["families"][name] = _summary(stats, match, rows)
    for i in sorted({i * len(pairs) // n_samples for i in range(min(n_samples, len(pairs)))}):
        result["samples"].append({"prompt": pairs[i].prompt, "expected": pairs[i].completion,
                                  "generated": texts[i], "family": families[i]})
    return result


def _summary(stats: _RowStats, match: np.ndarray, rows: np.ndarray) -> dict:
    counted = int(stats.counted[rows].sum())
    loss = float(stats.ce[rows].sum()) / max(counted, 1)
    if not math.isfinite(loss):
        raise SparkError(f"the model gives a non-finite loss ({loss}) on these rows; "
                         "the weights are broken")
    return {"n": int(rows.sum()), "n_counted": counted, "loss": _r(loss),
            "perplexity": _r(math.exp(min(loss, 700.0))),  # exp caps below float overflow
            "next_token_accuracy": _r(stats.correct[rows].sum() / max(counted, 1)),
            "exact_match": _r(match[rows].mean())}


def _log_softmax_at(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log p(target) in float64: logits (..., V), targets (...) -> (...)."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1))
    return np.take_along_axis(z, targets[..., None], axis=-1)[..., 0] - lse


def _row_stats(params, model: Model, chunk: list[Encoded], eos: int,
               byte_lengths: np.ndarray):
    """The _RowStats columns of one batch of rows; byte_lengths (V,): the tokenizer's."""
    logits, targets, mask = model.scored_logits(params, model.make_batch(chunk))  # (B, T, V)
    mask = np.asarray(mask, dtype=np.float64)                      # (B, T)
    ce = -_log_softmax_at(logits, targets)                         # (B, T)
    right = (np.argmax(logits, axis=-1) == targets)                # (B, T)
    # Completion tokens = counted targets but the EOS (text never holds the EOS).
    byte_mask = mask * (targets != eos)                            # (B, T)
    text = mask * byte_lengths[targets]                            # (B, T)
    return ((ce * mask).sum(axis=1), mask.sum(axis=1), (right * mask).sum(axis=1),
            (right * byte_mask).sum(axis=1), byte_mask.sum(axis=1), text.sum(axis=1))


def _r(x) -> float:
    return float(f"{float(x):.{SIG_DIGITS}g}")
