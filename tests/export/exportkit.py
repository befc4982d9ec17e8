"""Shared pieces of the export tests: small Spark weights files, the project's prompts."""
from __future__ import annotations

import json

import numpy as np

from sparktrain.model.config import ModelConfig
from sparktrain.model.build import build_model
from sparktrain.model.weights import save_weights
from sparkhelp import ROOT, run_spark

# GQA (4 query heads over 2 kv heads), head dim 8, 2 layers: every mapping row is used.
SMALL = ModelConfig(dim=32, n_layer=2, n_head=4, n_kv_head=2, seq_len=48)
TEXTS = ["hello world", "  two  spaces\n\ttab", "what is 2+2?", "é, ü, ß, 日本語, 🙂",
         "ý þ ÿ are not the specials", ""]


def rope_deinterleave(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of hf.rope_interleave: interleaved pairs back to rotate-half order."""
    rows, C = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, hd // 2, 2, C).swapaxes(1, 2)).reshape(rows, C)  # (heads hd, C)


def write_weights(path, cfg: ModelConfig = SMALL, seed: int = 3, **meta) -> dict:
    """A Spark weights file of cfg's arch; returns its params. Norm weights are
    perturbed so a swapped norm tensor would show."""
    params = build_model(cfg).init_params(seed, b"export-test")
    rng = np.random.default_rng(seed)
    for name, a in params.items():
        if a.ndim == 1:
            a += rng.normal(0, 0.1, a.shape).astype(a.dtype)
    save_weights(path, params, {"arch": cfg.to_dict(), "step_n": 7, "job": "export-test", **meta})
    return params


def project_prompts(limit: int = 12) -> list[str]:
    """User prompts of the committed train and held-out data."""
    prompts = []
    for rel in ("data/train/dataset.jsonl", "data/eval/tiny_heldout.jsonl"):
        for line in (ROOT / rel).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                prompts.append(row["prompt"] if "prompt" in row else
                               [m["content"] for m in row["messages"] if m["role"] == "user"][-1])
    return prompts[:limit]


def train_tiny_pairs(folder):
    """A tiny pairs model trained on the project's dataset in `folder` (about a second):
    the weights file the export proofs read."""
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl",
                            "--out", folder / "run", "--outer", 12, "--inner", 16, "--lr", 0.05])
    assert rc == 0, err
    return folder / "run" / "weights.safetensors"
