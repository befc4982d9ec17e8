"""Sampling from a trained model: prompts in, text out, greedy or temperature/top-k (the
batched core is model/build.py); and what a Spark-coder run learned, said at its end."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.core.jobfiles import CORPUS, TOKENIZER, WEIGHTS
from sparktrain.core.metric_keys import BASELINE_BPB
from sparktrain.model.config import ModelConfig
from sparktrain.model.sampling import MAX_NEW, generate_tokens
from sparktrain.model.weights import load_model
from sparktrain.data.baselines import BASELINE_ORDERS
from sparktrain.data.heldout import heldout_metrics
from sparktrain.eval.dynamic import heldout_dynamic
from sparktrain.data.pairs import prompt_tokens
from sparktrain.data.tokenizer import BYTES, read_tokenizer

GEN_BATCH = 64


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


def generate(params, cfg: ModelConfig, prompts: Sequence[str], *, max_new: int = 64,
             temperature: float = 0.0, top_k: int = 0, seed: int = 0,
             tokenizer=BYTES, tokens_out: list | None = None) -> list[str]:
    """Complete each prompt of a pairs model; stops at its EOS or after max_new tokens
    (bytes, or the ids of the job's BPE `tokenizer`). `tokens_out`, when given, receives
    each completion's token ids (EOS not included)."""
    _check_sampling(max_new, temperature, top_k, seed)
    contexts = [prompt_context(p, cfg.seq_len, tokenizer)[0] for p in prompts]
    return _sample(params, cfg, contexts, max_new, temperature, top_k, seed, tokenizer.eos,
                   tokenizer.completion_text, tokens_out)


def continue_text(params, cfg: ModelConfig, tokenizer, prompts: Sequence[str], *,
                  max_new: int = 64, temperature: float = 0.0, top_k: int = 0,
                  seed: int = 0, tokens_out: list | None = None) -> list[str]:
    """A corpus model continues text as it was trained on it: [BOS] + the prompt's
    tokens (no SEP), cut to the last seq_len, decoded with the job's tokenizer;
    stops at its EOS (the end of a file) or after max_new tokens."""
    _check_sampling(max_new, temperature, top_k, seed)
    contexts = [corpus_context(tokenizer, p, cfg.seq_len)[0] for p in prompts]
    return _sample(params, cfg, contexts, max_new, temperature, top_k, seed, tokenizer.eos,
                   tokenizer.decode, tokens_out)


def corpus_context(tokenizer, prompt: str, seq_len: int) -> tuple[np.ndarray, bool]:
    """([BOS] + tokens of the prompt, cut to the last seq_len tokens; whether it was cut)."""
    prompt_context(prompt, seq_len)  # the same checks: not empty, valid UTF-8
    tokens = np.concatenate([[tokenizer.bos], tokenizer.encode(prompt)]).astype(np.int64)
    return tokens[-seq_len:], len(tokens) > seq_len


def _sample(params, cfg, contexts, max_new, temperature, top_k, seed, eos, decode_fn,
            tokens_out=None):
    rng = np.random.default_rng(seed) if temperature > 0 else None
    texts = []
    for start in range(0, len(contexts), GEN_BATCH):
        chunk = contexts[start:start + GEN_BATCH]
        new = generate_tokens(params, cfg, chunk, [max_new] * len(chunk),
                              temperature=temperature, top_k=top_k, rng=rng, eos=eos)
        texts.extend(decode_fn(t) for t in new)
        if tokens_out is not None:
            tokens_out.extend(list(t) for t in new)
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


# What a Spark-coder run learned, said at its end (docs/compat.md, `spark code train`): the
# whole held-out stream's bits per byte (non-overlapping and sliding windows) beside the
# compressors (data/baselines.py), and fixed prompts completed sampled (fixed seed) and greedy.
LEARNED_PROMPTS = ("import os\n", "def read_config(path", "for i in range(")
TEMPERATURE, TOP_K, SEED, LEARNED_MAX_NEW = 0.7, 40, 0, 48


def learned(folder, source, eval_cfg) -> dict:
    """The held-out score and the fixed prompts' completions of the job in `folder`."""
    folder = Path(folder)
    tok, tok_sha256 = read_tokenizer(folder / TOKENIZER)
    params, cfg, _ = load_model(folder / WEIGHTS)
    score = heldout_metrics(source, folder / CORPUS, params, cfg, tok, tok_sha256, eval_cfg,
                            heldout_dynamic)
    sampled = continue_text(params, cfg, tok, LEARNED_PROMPTS, max_new=LEARNED_MAX_NEW,
                            temperature=TEMPERATURE, top_k=TOP_K, seed=SEED)
    greedy = continue_text(params, cfg, tok, LEARNED_PROMPTS, max_new=LEARNED_MAX_NEW)
    return {**{k: score[k] for k in ("bpb", "bpb_sliding", "sliding_stride", *BASELINE_BPB,
                                     *BASELINE_ORDERS, "heldout_bytes")},
            **{k: score[k] for k in ("bpb_dynamic", "dynamic") if k in score},
            "sampling": {"temperature": TEMPERATURE, "top_k": TOP_K, "seed": SEED,
                         "max_new_tokens": LEARNED_MAX_NEW},
            "samples": [{"prompt": p, "sampled": s, "greedy": g}
                        for p, s, g in zip(LEARNED_PROMPTS, sampled, greedy)]}


def learned_text(report: dict, model: str) -> str:
    """The report as the end of a run prints it."""
    s = report["sampling"]
    lines = [f"held-out bits per byte, the whole held-out stream ({report['heldout_bytes']:,} "
             f"bytes):",
             f"  {'model (' + model + ')':32s} {report['bpb']:.4f}",
             f"  {'  in sliding windows, stride ' + str(report['sliding_stride']):32s} "
             f"{report['bpb_sliding']:.4f}",
             *([f"  {'  dynamic, learning as it codes':32s} {report['bpb_dynamic']:.4f}"]
               if "bpb_dynamic" in report else []),
             f"  {'zlib level 9':32s} {report['zlib9_bpb']:.4f}",
             f"  {'lzma preset 9e':32s} {report['lzma9e_bpb']:.4f}",
             f"  {'PPMd, order ' + str(report['ppmd_order']):32s} {report['ppmd_bpb']:.4f}",
             "  given the train split first (C(train + held-out) - C(train)):",
             f"  {'lzma preset 9e, primed':32s} {report['lzma9e_primed_bpb']:.4f}",
             f"  {'PPMd, order ' + str(report['ppmd_primed_order']) + ', primed':32s} "
             f"{report['ppmd_primed_bpb']:.4f}",
             f"  model / primed PPMd: {report['bpb'] / report['ppmd_primed_bpb']:.4f}, sliding "
             f"{report['bpb_sliding'] / report['ppmd_primed_bpb']:.4f}"
             + (f", dynamic {report['bpb_dynamic'] / report['ppmd_primed_bpb']:.4f}"
                if "bpb_dynamic" in report else ""),
             *[f"  dynamic: {d['rule']} at {d['lr']:g}, decay {d['decay']:g}, an update after "
               f"each {d['stride']} tokens scored ({d['updates']:,} updates)"
               for d in [report.get("dynamic")] if d]]
    for item in report["samples"]:
        lines += ["", f"--- prompt ---\n{item['prompt']}",
                  f"--- sampled (temperature {s['temperature']}, top-k {s['top_k']}, seed "
                  f"{s['seed']}) ---\n{item['sampled']}",
                  f"--- greedy ---\n{item['greedy']}"]
    return "\n".join(lines) + "\n"
