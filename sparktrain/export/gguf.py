"""GGUF for llama.cpp through the `gguf` package: float32 `llama` tensors, q/k rows in its
rope order, a `gpt2` vocabulary. See docs/export.md ("The GGUF file")."""
from __future__ import annotations

import json
import os

import gguf
import numpy as np

from sparktrain.export.hf import check_target, name_map, publish_file, require_attention
from sparktrain.export.tokenizer import gguf_vocab, special_ids, model_tokenizer_json
from sparktrain.model.config import ModelConfig
from sparktrain.model.layers import RMS_EPS, ROPE_BASE
from sparktrain.model.weights import load_model

ARCH = "llama"
META_KEY = "spark.metadata"   # the weights' `spark` metadata, canonical JSON


def rope_interleave(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k rows from rotate-half order (u_i, u_{i+hd/2}) to llama.cpp's interleaved pairs
    (u_2i, u_2i+1): within each head, row p * hd/2 + i moves to row 2i + p, as llama.cpp's
    convert_hf_to_gguf.py `permute` does, so scores are unchanged."""
    rows, C = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, 2, hd // 2, C).swapaxes(1, 2)).reshape(rows, C)  # (heads hd, C)


def gguf_tensors(params: dict[str, np.ndarray], cfg: ModelConfig) -> dict[str, np.ndarray]:
    """GGUF name -> float32 tensor, q/k rows in llama.cpp's interleaved rope order."""
    heads = {"q": cfg.n_head, "k": cfg.n_kv_head}
    out = {}
    for spark, name in name_map(cfg, "gguf").items():
        w = np.ascontiguousarray(params[spark], dtype=np.float32)
        kind = spark.rsplit(".", 2)[-2]                       # spark.layers.L.<kind>.weight
        if spark.startswith("spark.layers.") and kind in heads:
            w = rope_interleave(w, heads[kind])
        out[name] = w
    return out


def write_gguf(path: str | os.PathLike, params, cfg: ModelConfig, meta: dict,
               tok_text: str) -> None:
    tokens, types, merges = gguf_vocab(tok_text)
    ids = special_ids(tok_text)
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name(str(meta.get("job") or "spark"))
    w.add_string(META_KEY, json.dumps(meta, sort_keys=True, separators=(",", ":")))
    keys = {"file_type": gguf.LlamaFileType.ALL_F32, "vocab_size": cfg.vocab,
            "context_length": cfg.seq_len, "embedding_length": cfg.dim,
            "block_count": cfg.n_layer, "feed_forward_length": 4 * cfg.dim,
            "head_count": cfg.n_head, "head_count_kv": cfg.n_kv_head,
            "rope_dimension_count": cfg.head_dim, "rope_freq_base": ROPE_BASE,
            "layer_norm_rms_eps": RMS_EPS, "tokenizer_model": "gpt2", "tokenizer_pre": "default",
            "token_list": tokens, "token_types": types, "token_merges": merges,
            "bos_token_id": ids["bos"], "sep_token_id": ids["sep"], "eos_token_id": ids["eos"],
            "pad_token_id": ids["eos"], "add_bos_token": True, "add_eos_token": False}
    for key, value in keys.items():  # in this order: the file's key-value section
        getattr(w, f"add_{key}")(value)
    for name, tensor in gguf_tensors(params, cfg).items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def export_gguf(weights: str | os.PathLike, out: str | os.PathLike,
                tokenizer: str | os.PathLike | None = None, force: bool = False) -> None:
    out = check_target(out, force, "gguf", inputs=(weights, tokenizer))
    params, cfg, meta = load_model(weights)
    require_attention(cfg, weights)
    tok_text = model_tokenizer_json(weights, meta, cfg, tokenizer)
    publish_file(lambda tmp: write_gguf(tmp, params, cfg, meta, tok_text), out)
