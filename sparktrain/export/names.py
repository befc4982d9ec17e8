"""The one table of tensor names: Spark, Hugging Face LlamaForCausalLM (and the Spark
architecture's folder) and GGUF `llama` (docs/export.md "Tensor names"), and what each
format cannot express."""
from __future__ import annotations

from sparktrain.core.errors import SparkError
from sparktrain.model.config import BIGRAM, SKIP, VALUE_MIX, ModelConfig, param_shapes


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
# (Spark name, Hugging Face name) of the options' own tensors: only the Spark architecture's
# folder (export/hf_code/) holds them; no GGUF architecture has them
OPTION_TENSORS: tuple[tuple[str, str], ...] = (
    (BIGRAM, "model.bigram.weight"), (VALUE_MIX, "model.value_mix.weight"),
    (SKIP, "model.skip.weight"))


def name_map(cfg: ModelConfig, to: str) -> dict[str, str]:
    """Spark name -> name in format `to`, for every tensor of cfg, in shape-table order."""
    col = FORMATS.index(to)
    table = {row[0].format(L=L): row[col].format(L=L) for row in TENSORS
             for L in (range(cfg.n_layer) if "{L}" in row[0] else (None,))}
    if to != "gguf":
        table.update((row[0], row[col]) for row in OPTION_TENSORS)
    return {name: table[name] for name in param_shapes(cfg)}


def require_attention(cfg: ModelConfig, path, to: str) -> None:
    """One line for the mean-pool kind: no format computes it."""
    if not cfg.train_attn:
        raise SparkError(f"{path} is a mean-pool model (train_attn false); it has no Llama "
                         f"equivalent; export to {to} a model trained with attention")


# The llama.cpp architecture that computes a model exactly, by the options it has: `arcee` is a
# Llama whose MLP is relu(x)^2 with no gate; `qwen3` (rotate-half rope, no q/k permutation)
# rms-normalises q and k per head with a weight (ones here) before rope, which keeps each
# head's norm, so it equals Spark's norm after rope. Two options together, or any other,
# have none (docs/export.md "What exports").
GGUF_ARCHS = {(): "llama", (("mlp", "relu2"),): "arcee", (("qk_norm", True),): "qwen3"}
# transformers has the same three (ArceeForCausalLM, Qwen3ForCausalLM); any other set is the
# Spark architecture's own code (export/spark_arch.py)
HF_ARCHS = GGUF_ARCHS
# qwen3's per-head q/k norm weights (ones: Spark's norm has none), layer L
QK_NORMS = {"hf": ("model.layers.{L}.self_attn.q_norm.weight",
                   "model.layers.{L}.self_attn.k_norm.weight"),
            "gguf": ("blk.{L}.attn_q_norm.weight", "blk.{L}.attn_k_norm.weight")}


def hf_arch(cfg: ModelConfig) -> str:
    """The model_type of the Hugging Face folder: llama, arcee, qwen3, or spark."""
    return HF_ARCHS.get(tuple(sorted(cfg.options().items())), "spark")


def gguf_arch(cfg: ModelConfig, path) -> str:
    """The llama.cpp architecture of GGUF_ARCHS that computes this model, or one line naming
    its options and the Hugging Face route."""
    require_attention(cfg, path, "gguf")
    options = cfg.options()
    arch = GGUF_ARCHS.get(tuple(sorted(options.items())))
    if arch is None:
        named = ", ".join(f"{k}: {v}" for k, v in options.items())
        raise SparkError(f"{path} uses the architecture option{'s' * (len(options) > 1)} "
                         f"{named}, which no llama.cpp architecture computes (arcee runs "
                         f"mlp: relu2 alone, qwen3 qk_norm alone); it is not exported to "
                         f"gguf: export it with --to hf (transformers, trust_remote_code=True), "
                         f"or train without it")
    return arch
