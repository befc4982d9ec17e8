"""What a Spark-coder run learned, said at its end: the whole held-out stream's bits per
byte (non-overlapping and sliding windows) beside zlib-9 and lzma-9e, and fixed prompts
completed sampled (fixed seed) and greedy. See docs/compat.md (`spark code train`).
"""
from __future__ import annotations

from pathlib import Path

from sparktrain.data.tokenizer import read_tokenizer
from sparktrain.eval.generate import continue_text
from sparktrain.core.jobfiles import CORPUS, TOKENIZER, WEIGHTS
from sparktrain.model.weights import load_model

PROMPTS = ("import os\n", "def read_config(path", "for i in range(")
TEMPERATURE, TOP_K, SEED, MAX_NEW = 0.7, 40, 0, 48


def learned(folder, source, eval_cfg) -> dict:
    """The held-out score and the fixed prompts' completions of the job in `folder`."""
    folder = Path(folder)
    tok, tok_sha256 = read_tokenizer(folder / TOKENIZER)
    params, cfg, _ = load_model(folder / WEIGHTS)
    score = source.evaluate(folder / CORPUS, params, cfg, tok, tok_sha256, eval_cfg)
    sampled = continue_text(params, cfg, tok, PROMPTS, max_new=MAX_NEW,
                            temperature=TEMPERATURE, top_k=TOP_K, seed=SEED)
    greedy = continue_text(params, cfg, tok, PROMPTS, max_new=MAX_NEW)
    return {**{k: score[k] for k in ("bpb", "bpb_sliding", "sliding_stride", "zlib9_bpb",
                                     "lzma9e_bpb", "heldout_bytes")},
            "sampling": {"temperature": TEMPERATURE, "top_k": TOP_K, "seed": SEED,
                         "max_new_tokens": MAX_NEW},
            "samples": [{"prompt": p, "sampled": s, "greedy": g}
                        for p, s, g in zip(PROMPTS, sampled, greedy)]}


def learned_text(report: dict, model: str) -> str:
    """The report as the end of a run prints it."""
    s = report["sampling"]
    lines = [f"held-out bits per byte, the whole held-out stream ({report['heldout_bytes']:,} "
             f"bytes):",
             f"  {'model (' + model + ')':32s} {report['bpb']:.4f}",
             f"  {'  in sliding windows, stride ' + str(report['sliding_stride']):32s} "
             f"{report['bpb_sliding']:.4f}",
             f"  {'zlib level 9':32s} {report['zlib9_bpb']:.4f}",
             f"  {'lzma preset 9e':32s} {report['lzma9e_bpb']:.4f}"]
    for item in report["samples"]:
        lines += ["", f"--- prompt ---\n{item['prompt']}",
                  f"--- sampled (temperature {s['temperature']}, top-k {s['top_k']}, seed "
                  f"{s['seed']}) ---\n{item['sampled']}",
                  f"--- greedy ---\n{item['greedy']}"]
    return "\n".join(lines) + "\n"
