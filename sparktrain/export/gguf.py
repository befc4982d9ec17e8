"""GGUF for llama.cpp through the `gguf` package: float32 tensors of `llama` (or of `arcee`
or `qwen3` for the one option each computes), q/k rows in the architecture's rope order, a
`gpt2` vocabulary (docs/export.md "The GGUF file")."""
from __future__ import annotations

import json
import os

import numpy as np

from sparktrain.core.errors import SparkError
from sparktrain.core.gate import check_target
from sparktrain.core.publish import publish_file
from sparktrain.core.safeload import load_json
from sparktrain.export.names import QK_NORMS, gguf_arch, name_map
from sparktrain.export.tokenizer import model_tokenizer_json, special_ids
from sparktrain.model.config import ModelConfig
from sparktrain.model.layers import RMS_EPS, ROPE_BASE
from sparktrain.model.weights import load_model

# the architectures whose rope turns adjacent pairs (llama.cpp's "norm" rope): their q/k rows
# are permuted; qwen3's rope turns (u_i, u_{i+hd/2}), as Spark's
INTERLEAVED_ROPE = ("llama", "arcee")
GGUF_META_KEY = "spark.metadata"   # the weights' `spark` metadata, canonical JSON
# One merge that never fires (0xFD twice; UTF-8 text never holds 0xFD): the gguf writer
# refuses an empty array and llama.cpp a BPE vocab without merges (docs/export.md).
GGUF_NULL_MERGE = "ý ý"
GGUF_NORMAL, GGUF_CONTROL = 1, 3     # llama.cpp token types
# llama.cpp's name for GPT-2's split (the regex of `tokenizers`' ByteLevel pre-tokenizer,
# which the project's BPE uses; "default" would split digits by three and punctuation
# apart). No `seperator_token_id` key is written: llama-cpp-python appends that token to
# every text prompt; a pairs prompt names its SEP in the text (`hi<|sep|>`).
GGUF_PRE_TOKENIZER = "gpt-2"


def rope_interleave(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k rows from rotate-half order (u_i, u_{i+hd/2}) to llama.cpp's interleaved pairs
    (u_2i, u_2i+1): within each head, row p * hd/2 + i moves to row 2i + p, as llama.cpp's
    convert_hf_to_gguf.py `permute` does, so scores are unchanged."""
    rows, C = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, 2, hd // 2, C).swapaxes(1, 2)).reshape(rows, C)  # (heads hd, C)


def gguf_tensors(params: dict[str, np.ndarray], cfg: ModelConfig,
                 arch: str = "llama") -> dict[str, np.ndarray]:
    """GGUF name -> float32 tensor, q/k rows in the rope order of `arch` (llama.cpp's
    interleaved pairs for llama and arcee); qwen3's q/k norm weights are ones."""
    heads = {"q": cfg.n_head, "k": cfg.n_kv_head} if arch in INTERLEAVED_ROPE else {}
    out = {}
    for spark, name in name_map(cfg, "gguf").items():
        w = np.ascontiguousarray(params[spark], dtype=np.float32)
        kind = spark.rsplit(".", 2)[-2]                       # spark.layers.L.<kind>.weight
        if spark.startswith("spark.layers.") and kind in heads:
            w = rope_interleave(w, heads[kind])
        out[name] = w
        if arch == "qwen3" and kind == "v":                   # after blk.L.attn_v, per layer
            for norm in QK_NORMS["gguf"]:
                out[norm.format(L=spark.split(".")[2])] = np.ones(cfg.head_dim, np.float32)
    return out


def write_gguf(path: str | os.PathLike, params, cfg: ModelConfig, meta: dict,
               tok_text: str, arch: str = "llama") -> None:
    import gguf   # only here: the other exports and imports never load it

    tokens, types, merges = gguf_vocab(tok_text)
    ids = special_ids(tok_text)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(str(meta.get("job") or "spark"))
    w.add_string(GGUF_META_KEY, json.dumps(meta, sort_keys=True, separators=(",", ":")))
    keys = {"file_type": gguf.LlamaFileType.ALL_F32, "vocab_size": cfg.vocab,
            "context_length": cfg.seq_len, "embedding_length": cfg.dim,
            "block_count": cfg.n_layer, "feed_forward_length": 4 * cfg.dim,
            "head_count": cfg.n_head, "head_count_kv": cfg.n_kv_head,
            "rope_dimension_count": cfg.head_dim, "rope_freq_base": ROPE_BASE,
            "layer_norm_rms_eps": RMS_EPS, "tokenizer_model": "gpt2",
            "tokenizer_pre": GGUF_PRE_TOKENIZER,
            "token_list": tokens, "token_types": types, "token_merges": merges,
            "bos_token_id": ids["bos"], "eos_token_id": ids["eos"],
            "pad_token_id": ids["eos"], "add_bos_token": True, "add_eos_token": False}
    if arch == "qwen3":  # the head size said (llama.cpp takes dim / heads when absent)
        keys |= {"key_length": cfg.head_dim, "value_length": cfg.head_dim}
    for key, value in keys.items():  # in this order: the file's key-value section
        getattr(w, f"add_{key}")(value)
    for name, tensor in gguf_tensors(params, cfg, arch).items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def export_gguf(weights: str | os.PathLike, out: str | os.PathLike,
                tokenizer: str | os.PathLike | None = None, force: bool = False) -> None:
    out = check_target(out, force, "gguf", inputs=(weights, tokenizer))
    params, cfg, meta = load_model(weights)
    arch = gguf_arch(cfg, weights)
    tok_text = model_tokenizer_json(weights, meta, cfg, tokenizer)
    publish_file(lambda tmp: write_gguf(tmp, params, cfg, meta, tok_text, arch), out)


def gguf_vocab(tok_text: str) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, llama.cpp token types, merges) of a byte-level BPE tokenizer.json."""
    data = load_json(tok_text, "tokenizer.json")
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise SparkError(f"GGUF export needs a byte-level BPE tokenizer, this one is a "
                         f"{model.get('type')!r} model")
    vocab = dict(model.get("vocab") or {})
    for added in data.get("added_tokens") or []:
        vocab.setdefault(added["content"], added["id"])
    by_id = sorted((i, t) for t, i in vocab.items())
    if [i for i, _ in by_id] != list(range(len(by_id))):
        raise SparkError("GGUF export needs token ids 0..n-1 without gaps")
    control = {a["content"] for a in data.get("added_tokens") or [] if a.get("special")}
    tokens = [t for _, t in by_id]
    types = [GGUF_CONTROL if t in control else GGUF_NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    return tokens, types, merges or [GGUF_NULL_MERGE]
