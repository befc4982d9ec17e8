"""The one table of tensor names: Spark <-> Hugging Face Llama <-> GGUF (llama.cpp).

Both directions (export and import) and both formats read this table; nothing
else spells a foreign tensor name. `{L}` is the layer index. The math lines up
one to one (docs/export.md): RMSNorm eps 1e-5, RoPE theta 10000 on rotate-half
pairs (u_i, u_{i+hd/2}), grouped-query attention, SwiGLU with 4 x dim, untied
head, no biases.
"""
from __future__ import annotations

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.model.config import ModelConfig, param_shapes

# (Spark name, Hugging Face LlamaForCausalLM name, GGUF `llama` name)
TENSORS: tuple[tuple[str, str, str], ...] = (
    ("spark.embed.weight", "model.embed_tokens.weight", "token_embd.weight"),
    ("spark.layers.{L}.attn_norm.weight", "model.layers.{L}.input_layernorm.weight",
     "blk.{L}.attn_norm.weight"),
    ("spark.layers.{L}.q.weight", "model.layers.{L}.self_attn.q_proj.weight",
     "blk.{L}.attn_q.weight"),
    ("spark.layers.{L}.k.weight", "model.layers.{L}.self_attn.k_proj.weight",
     "blk.{L}.attn_k.weight"),
    ("spark.layers.{L}.v.weight", "model.layers.{L}.self_attn.v_proj.weight",
     "blk.{L}.attn_v.weight"),
    ("spark.layers.{L}.o.weight", "model.layers.{L}.self_attn.o_proj.weight",
     "blk.{L}.attn_output.weight"),
    ("spark.layers.{L}.mlp_norm.weight", "model.layers.{L}.post_attention_layernorm.weight",
     "blk.{L}.ffn_norm.weight"),
    ("spark.layers.{L}.mlp_gate.weight", "model.layers.{L}.mlp.gate_proj.weight",
     "blk.{L}.ffn_gate.weight"),
    ("spark.layers.{L}.mlp_up.weight", "model.layers.{L}.mlp.up_proj.weight",
     "blk.{L}.ffn_up.weight"),
    ("spark.layers.{L}.mlp_down.weight", "model.layers.{L}.mlp.down_proj.weight",
     "blk.{L}.ffn_down.weight"),
    ("spark.final_norm.weight", "model.norm.weight", "output_norm.weight"),
    ("spark.lm_head.weight", "lm_head.weight", "output.weight"),
)
FORMATS = ("spark", "hf", "gguf")   # the table's columns, in order


def name_map(cfg: ModelConfig, to: str) -> dict[str, str]:
    """Spark name -> name in format `to`, for every tensor of cfg, in shape-table order."""
    col = FORMATS.index(to)
    table: dict[str, str] = {}
    for row in TENSORS:
        layers = range(cfg.n_layer) if "{L}" in row[0] else (None,)
        for L in layers:
            table[row[0].format(L=L)] = row[col].format(L=L)
    return {name: table[name] for name in param_shapes(cfg)}


def rope_interleave(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k rows from rotate-half order to llama.cpp's interleaved pairs.

    Spark and HF rotate (u_i, u_{i+hd/2}); GGUF's llama rotates (u_2i, u_2i+1).
    Within each head, row p * hd/2 + i moves to row 2i + p: the permutation of
    llama.cpp's convert_hf_to_gguf.py (`permute`), so scores are unchanged.
    """
    rows, C = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, 2, hd // 2, C).swapaxes(1, 2)).reshape(rows, C)  # (heads hd, C)


def rope_deinterleave(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of rope_interleave: interleaved pairs back to rotate-half order."""
    rows, C = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, hd // 2, 2, C).swapaxes(1, 2)).reshape(rows, C)  # (heads hd, C)


def require_attention(cfg: ModelConfig, path) -> None:
    if not cfg.train_attn:
        raise SparkError(f"{path} is a mean-pool model (train_attn false); it has no Llama "
                         "equivalent, export a model trained with attention")
