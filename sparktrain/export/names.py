"""The one table of tensor names: Spark, Hugging Face LlamaForCausalLM and GGUF `llama`
(docs/export.md "Tensor names"), and what a Llama cannot express."""
from __future__ import annotations

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


def require_llama(cfg: ModelConfig, path, to: str) -> None:
    """One line when a Llama cannot compute this model: the mean-pool kind, or an
    architecture option (docs/export.md "What exports")."""
    if not cfg.train_attn:
        raise SparkError(f"{path} is a mean-pool model (train_attn false); it has no Llama "
                         "equivalent, export a model trained with attention")
    for name, value in cfg.options().items():
        raise SparkError(f"{path} uses the architecture option {name}: {value}, which a "
                         f"Llama cannot express; it is not exported to {to} (train without it "
                         f"to export)")
