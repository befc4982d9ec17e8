"""The Spark architecture's Hugging Face folder, for a model with options a Llama cannot
express (docs/export.md "Models with architecture options"): its config.json, with `auto_map`
naming the modelling code that export/hf_code/ holds, and those files' bytes, copied into the
folder as they are (transformers loads them with `trust_remote_code=True`)."""
from __future__ import annotations

from pathlib import Path

from sparktrain.model.config import OPTION_DEFAULTS, ModelConfig
from sparktrain.model.layers import RMS_EPS, ROPE_BASE

CODE_DIR = Path(__file__).resolve().parent / "hf_code"
CODE_FILES = ("configuration_spark.py", "modeling_spark.py")
ARCHITECTURE = "SparkForCausalLM"
AUTO_MAP = {"AutoConfig": "configuration_spark.SparkConfig",
            "AutoModelForCausalLM": "modeling_spark.SparkForCausalLM"}


def spark_config(cfg: ModelConfig, ids: dict[str, int]) -> dict:
    """config.json's fields of SparkConfig (hf_code/configuration_spark.py): the Llama shape
    fields, every option by its Spark name, and the auto_map transformers follows."""
    return {"architectures": [ARCHITECTURE], "model_type": "spark", "auto_map": AUTO_MAP,
            "vocab_size": cfg.vocab, "hidden_size": cfg.dim, "intermediate_size": 4 * cfg.dim,
            "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head,
            "num_key_value_heads": cfg.n_kv_head, "head_dim": cfg.head_dim,
            "max_position_embeddings": cfg.seq_len, "rms_norm_eps": RMS_EPS,
            "rope_theta": ROPE_BASE, "tie_word_embeddings": False,
            **{name: getattr(cfg, name) for name in OPTION_DEFAULTS},
            "bos_token_id": ids["bos"], "eos_token_id": ids["eos"], "pad_token_id": ids["eos"],
            "torch_dtype": "float32", "use_cache": False}


def code_files() -> dict[str, bytes]:
    """File name -> bytes of the modelling code the folder carries."""
    return {name: (CODE_DIR / name).read_bytes() for name in CODE_FILES}
