"""The one table of tensor names: Spark <-> Hugging Face Llama <-> GGUF (llama.cpp), read by
export and import alike (nothing else spells a foreign tensor name; `{L}` is the layer).
The math lines up one to one: docs/export.md ("The math, side by side").
"""
from __future__ import annotations

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.model.config import ModelConfig, param_shapes

# (Spark name, Hugging Face LlamaForCausalLM name, GGUF `llama` name)
TENSORS: tuple[tuple[str, str, str], ...] = (
    ("spark.embed.weight", "model.embed_tokens.weight", "token_embd.weight"),
    # a layer's rows: spark.layers.{L}.X.weight, model.layers.{L}.Y.weight, blk.{L}.Z.weight
    *((f"spark.layers.{{L}}.{x}.weight", f"model.layers.{{L}}.{y}.weight",
       f"blk.{{L}}.{z}.weight") for x, y, z in (
        ("attn_norm", "input_layernorm", "attn_norm"), ("q", "self_attn.q_proj", "attn_q"),
        ("k", "self_attn.k_proj", "attn_k"), ("v", "self_attn.v_proj", "attn_v"),
        ("o", "self_attn.o_proj", "attn_output"),
        ("mlp_norm", "post_attention_layernorm", "ffn_norm"),
        ("mlp_gate", "mlp.gate_proj", "ffn_gate"), ("mlp_up", "mlp.up_proj", "ffn_up"),
        ("mlp_down", "mlp.down_proj", "ffn_down"))),
    ("spark.final_norm.weight", "model.norm.weight", "output_norm.weight"),
    ("spark.lm_head.weight", "lm_head.weight", "output.weight"),
)
FORMATS = ("spark", "hf", "gguf")   # the table's columns, in order


def name_map(cfg: ModelConfig, to: str) -> dict[str, str]:
    """Spark name -> name in format `to`, for every tensor of cfg, in shape-table order."""
    col = FORMATS.index(to)
    table = {row[0].format(L=L): row[col].format(L=L) for row in TENSORS
             for L in (range(cfg.n_layer) if "{L}" in row[0] else (None,))}
    return {name: table[name] for name in param_shapes(cfg)}


def rope_interleave(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k rows from rotate-half order (u_i, u_{i+hd/2}) to llama.cpp's interleaved pairs
    (u_2i, u_2i+1): within each head, row p * hd/2 + i moves to row 2i + p, as llama.cpp's
    convert_hf_to_gguf.py `permute` does, so scores are unchanged."""
    rows, C = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, 2, hd // 2, C).swapaxes(1, 2)).reshape(rows, C)  # (heads hd, C)


def require_attention(cfg: ModelConfig, path) -> None:
    if not cfg.train_attn:
        raise SparkError(f"{path} is a mean-pool model (train_attn false); it has no Llama "
                         "equivalent, export a model trained with attention")
