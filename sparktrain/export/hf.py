"""Hugging Face Llama folders: export (config.json carries the `spark` metadata) and import,
which gives back the same bytes; GGUF for llama.cpp through the `gguf` package (float32
`llama` tensors, q/k rows in its rope order, a `gpt2` vocabulary); the one table of tensor
names (Spark, HF, GGUF); the model card; the tokenizer an exported model travels with (the
byte tokenizer, id = byte value, or the job's own tokenizer.json checked by its sha256); the
publisher: outputs appear whole or not at all. See docs/export.md ("The GGUF file" for GGUF)."""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import re
import secrets
import shutil
import stat
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import save as save_safetensors
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

from sparktrain.data.pairs import BOS, EOS, SEP
from sparktrain.data.source import trained_on
from sparktrain.data.tokenizer import read_tokenizer
from sparktrain.core.errors import SparkError, first_line, printable
from sparktrain.core.fsutil import (canonical_json, folder_fd, read_input, temp_stem, write_at,
                                    write_error)
from sparktrain.core.gate import check_output
from sparktrain.core.jobfiles import CHECKPOINT, TOKENIZER
from sparktrain.core.safeload import load_json
from sparktrain.core.values import is_finite, is_number
from sparktrain.model.config import ModelConfig, n_params, param_shapes, weights_fits
from sparktrain.model.layers import RMS_EPS, ROPE_BASE
from sparktrain.model.weights import (check_params, check_tensors, config_from_meta, load_model,
                                      read_tensors, weights_bytes)
from sparktrain.params import StepConfig
from sparktrain.train.outputs import job_state, read_json

META_FIELD = "spark_metadata"   # config.json key holding the weights' `spark` metadata
GGUF_ARCH = "llama"
GGUF_META_KEY = "spark.metadata"   # the weights' `spark` metadata, canonical JSON
MODEL_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
IGNORED_SUFFIX = "rotary_emb.inv_freq"   # a buffer some checkpoints save; derived, not learned
MAX_SHARDS = 1024


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


def hf_config(cfg: ModelConfig, meta: dict, ids: dict[str, int]) -> dict:
    """config.json of a LlamaForCausalLM that computes exactly the Spark forward."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": cfg.vocab, "hidden_size": cfg.dim, "intermediate_size": 4 * cfg.dim,
            "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head,
            "num_key_value_heads": cfg.n_kv_head, "head_dim": cfg.head_dim,
            "hidden_act": "silu", "max_position_embeddings": cfg.seq_len,
            "rms_norm_eps": RMS_EPS, "rope_theta": ROPE_BASE,  # transformers 4.x
            "rope_scaling": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_BASE},  # 5.x
            "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
            "bos_token_id": ids["bos"], "eos_token_id": ids["eos"], "pad_token_id": ids["eos"],
            "torch_dtype": "float32", "initializer_range": 0.02, "use_cache": True,
            META_FIELD: meta}


def generation_config(ids: dict[str, int]) -> dict:
    """Greedy by default, stop at EOS: what `spark generate` does at temperature 0."""
    return {"bos_token_id": ids["bos"], "eos_token_id": ids["eos"],
            "pad_token_id": ids["eos"], "do_sample": False}


def spark_config(conf: dict, where: str) -> ModelConfig:
    """The ModelConfig of a Llama config.json, or one line saying what does not fit."""
    get = conf.get
    architectures = get("architectures") or []
    if not isinstance(architectures, list):
        raise SparkError(f"{where}: architectures must be a list of class names, "
                         f"got {type(architectures).__name__}")
    if get("model_type") != "llama" and "LlamaForCausalLM" not in architectures:
        raise SparkError(f"{where}: model_type {get('model_type')!r} is not llama")
    for key in ("attention_bias", "mlp_bias"):
        if get(key):
            raise SparkError(f"{where}: {key} is true; Spark layers have no bias terms")
    if get("tie_word_embeddings", False):
        raise SparkError(f"{where}: tie_word_embeddings is true; Spark's lm_head is untied")
    if get("hidden_act", "silu") != "silu":
        raise SparkError(f"{where}: hidden_act {get('hidden_act')!r}; Spark's MLP is SwiGLU "
                         "(silu)")
    _check_rope(conf, where)
    eps = get("rms_norm_eps", 1e-6)
    if not _close(eps, RMS_EPS):
        raise SparkError(f"{where}: rms_norm_eps {eps!r}; Spark's RMSNorm uses {RMS_EPS}")
    try:
        dim, heads = _integer(get("hidden_size")), _integer(get("num_attention_heads"))
        kv = get("num_key_value_heads")
        kv = heads if kv is None else _integer(kv)  # 0 is a shape to refuse, not "unset"
        cfg = ModelConfig(dim=dim, n_layer=_integer(get("num_hidden_layers")), n_head=heads,
                          n_kv_head=kv, seq_len=_integer(get("max_position_embeddings")),
                          vocab=_integer(get("vocab_size")))
    except (TypeError, ValueError, OverflowError):
        raise SparkError(f"{where}: hidden_size, num_hidden_layers, num_attention_heads, "
                         "max_position_embeddings and vocab_size must be integers") from None
    try:  # zero or negative shapes first: the checks below divide by them
        cfg = cfg.validate()
    except SparkError as err:
        raise SparkError(f"{where}: {err}") from None
    if get("intermediate_size") != 4 * dim:
        raise SparkError(f"{where}: intermediate_size {get('intermediate_size')!r}; "
                         f"Spark's MLP is 4 x hidden_size = {4 * dim}")
    if get("head_dim") not in (None, dim // heads):
        raise SparkError(f"{where}: head_dim {get('head_dim')!r}; Spark's is hidden_size / "
                         f"num_attention_heads = {dim // heads}")
    return cfg


def _close(value, want: float) -> bool:
    """A finite JSON number within 1e-12 of `want` (NaN compares false: isfinite first;
    an integer past float range is not close to anything)."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value) and abs(value - want) <= 1e-12
    except OverflowError:
        return False


def _integer(value) -> int:
    """An integer field: an int, or a float with an integer value (some writers emit
    4096.0); anything else, NaN and infinities included, is a ValueError."""
    if not is_number(value):
        raise TypeError(value)
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(value)
    return int(value)


def _check_rope(conf: dict, where: str) -> None:
    params = conf.get("rope_parameters")
    for key in ("rope_parameters", "rope_scaling"):
        if conf.get(key) is not None and not isinstance(conf.get(key), dict):
            raise SparkError(f"{where}: {key} must be an object or null, "
                             f"got {type(conf.get(key)).__name__}")
    if params is not None:
        kind, theta = params.get("rope_type", "default"), params.get("rope_theta", ROPE_BASE)
    else:
        scaling = conf.get("rope_scaling")
        kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
        theta = conf.get("rope_theta", ROPE_BASE)
    if kind != "default":
        raise SparkError(f"{where}: RoPE scaling {kind!r}; Spark uses plain RoPE")
    if theta != ROPE_BASE:
        raise SparkError(f"{where}: rope_theta {theta!r}; Spark uses {ROPE_BASE:g}")


def export_hf(weights: str | os.PathLike, out: str | os.PathLike,
              tokenizer: str | os.PathLike | None = None, force: bool = False) -> list[str]:
    """Write the Hugging Face folder; returns the file names written."""
    out = check_target(out, force, "hf", inputs=(weights, tokenizer))
    params, cfg, meta = load_model(weights)
    require_llama(cfg, weights, "hf")
    tok_text = model_tokenizer_json(weights, meta, cfg, tokenizer)
    ids = special_ids(tok_text)
    names = name_map(cfg, "hf")
    tensors = {names[n]: np.ascontiguousarray(params[n], dtype=np.float32) for n in names}
    files = {
        "config.json": canonical_json(hf_config(cfg, meta, ids)).encode(),
        "generation_config.json": canonical_json(generation_config(ids)).encode(),
        MODEL_FILE: save_safetensors(tensors, metadata={"format": "pt"}),
        TOKENIZER: tok_text.encode(),  # Hugging Face names it as a job folder does
        "tokenizer_config.json": canonical_json(tokenizer_config(tok_text, cfg)).encode(),
    }
    records = job_records(weights)
    files[CARD_FILE] = model_card(meta, cfg, tokenizer_kind(tok_text, records.get(
        "checkpoint", {})), records).encode()
    publish_dir(files, out)
    return sorted(files)


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
    import gguf   # only here: the other exports and imports never load it

    tokens, types, merges = gguf_vocab(tok_text)
    ids = special_ids(tok_text)
    w = gguf.GGUFWriter(path, GGUF_ARCH)
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
    require_llama(cfg, weights, "gguf")
    tok_text = model_tokenizer_json(weights, meta, cfg, tokenizer)
    publish_file(lambda tmp: write_gguf(tmp, params, cfg, meta, tok_text), out)



def import_hf(folder: str | os.PathLike, out: str | os.PathLike, force: bool = False) -> dict:
    """Read a Llama folder and write Spark weights; returns the metadata written."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SparkError(f"{os.fspath(folder)} is not a folder; give the Hugging Face model "
                         "folder")
    out = check_target(out, force, "safetensors", inputs=(folder,))
    conf = _read_json(folder / "config.json", "config.json")
    cfg = spark_config(conf, os.fspath(folder / "config.json"))
    weights_fits("spark import", cfg, copies=3)  # the file's tensors, Spark's, the bytes
    meta = _import_meta(conf, cfg, folder)
    params = _spark_params(_read_tensors(folder), cfg, folder)
    check_params(params, cfg, folder)
    check_tensors(params, folder)
    data = weights_bytes(params, meta)
    publish_file(lambda tmp: Path(tmp).write_bytes(data), out)
    return meta


def _import_meta(conf: dict, cfg: ModelConfig, folder: Path) -> dict:
    """The exported `spark` metadata when present (must agree with the Llama fields),
    else a fresh record for a foreign checkpoint."""
    meta = conf.get(META_FIELD)
    if meta is None:
        return {"arch": cfg.to_dict(), "step_n": 0, "trained": False, "imported_from": "hf"}
    if not isinstance(meta, dict):
        raise SparkError(f"{folder / 'config.json'}: {META_FIELD} is not an object")
    recorded = config_from_meta(meta, folder / "config.json")
    if recorded != cfg:
        diff = ", ".join(f"{k} {v} vs {getattr(cfg, k)}" for k, v in recorded.to_dict().items()
                         if getattr(cfg, k) != v)
        raise SparkError(f"{folder / 'config.json'}: {META_FIELD}.arch disagrees with the "
                         f"Llama fields of the same file ({diff})")
    return meta


def _read_json(path: Path, what: str) -> dict:
    obj = load_json(read_input(path, what), os.fspath(path))  # no NaN, bounded depth
    if not isinstance(obj, dict):
        raise SparkError(f"{os.fspath(path)} is not a JSON object")
    return obj


def _shard_files(folder: Path) -> list[Path]:
    """The shard files an index names, each a plain file directly in `folder`."""
    index = os.fspath(folder / INDEX_FILE)
    weight_map = _read_json(folder / INDEX_FILE, "index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise SparkError(f"{index}: weight_map must be an object of tensor name -> shard file "
                         "name")
    if not all(isinstance(v, str) for v in weight_map.values()):
        raise SparkError(f"{index}: weight_map values must be shard file names")
    names = set(weight_map.values())
    if len(names) > MAX_SHARDS:
        raise SparkError(f"{index}: {len(names):,} shard files, above the limit of {MAX_SHARDS}")
    files = []
    for name in sorted(names):
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise SparkError(f"{index}: shard {printable(repr(name))[:80]} is not a file name "
                             "in the model folder")
        path = folder / name
        if path.is_symlink() and path.resolve().parent != folder.resolve():
            raise SparkError(f"{os.fspath(path)} is a link out of the model folder; "
                             "copy the shard into the folder")
        files.append(path)
    return files


def _read_tensors(folder: Path) -> dict[str, np.ndarray]:
    """All tensors of model.safetensors, or of the shards an index names."""
    sharded = (folder / INDEX_FILE).exists() and not (folder / MODEL_FILE).exists()
    files = _shard_files(folder) if sharded else [folder / MODEL_FILE]
    tensors: dict[str, np.ndarray] = {}
    for path in files:
        data = read_input(path, "weights file")
        try:
            tensors.update(read_tensors(data, path))  # F32, F16, BF16: float32, exactly
        except (SafetensorError, ValueError, TypeError, KeyError, OverflowError,
                RecursionError) as err:
            raise SparkError(f"{os.fspath(path)} is not a readable safetensors file "
                             f"({first_line(err)}); float32 and float16 are read") from None
    return tensors


def _spark_params(hf_tensors: dict[str, np.ndarray], cfg: ModelConfig,
                  folder: Path) -> dict[str, np.ndarray]:
    names, shapes = name_map(cfg, "hf"), param_shapes(cfg)
    spark_of = {hf: spark for spark, hf in names.items()}
    for hf in sorted(hf_tensors):
        if hf.endswith(".bias"):
            raise SparkError(f"{os.fspath(folder)}: tensor {hf} is a bias; Spark layers have "
                             "none")
        if hf not in spark_of and not hf.endswith(IGNORED_SUFFIX):
            raise SparkError(f"{os.fspath(folder)}: tensor {hf} has no Spark counterpart")
    params = {}
    for spark, hf in names.items():
        if hf not in hf_tensors:
            raise SparkError(f"{os.fspath(folder)} lacks tensor {hf}")
        a = hf_tensors[hf]  # float32: read_tensors converts F16 and BF16 exactly
        if tuple(a.shape) != shapes[spark]:
            raise SparkError(f"{os.fspath(folder)}: tensor {hf} has shape {tuple(a.shape)}, "
                             f"config.json implies {shapes[spark]}")
        params[spark] = np.ascontiguousarray(a, dtype=np.float32)
    return params


CARD_FILE = "README.md"
# The knobs a checkpoint records (StepConfig's fields less those never recorded)
KNOBS = tuple(f.name for f in dataclasses.fields(StepConfig)
              if f.name not in ("step_n", "workers", "device"))
METRICS = ("loss", "perplexity", "bpb", "next_token_accuracy", "exact_match", "copy_recall")
BASELINES = ("zlib9_bpb", "lzma9e_bpb")
# What a quoted string may not hold: a line break, a table cell break, raw HTML, a code-span break
CARD_SAFE = str.maketrans({"\r": " ", "\n": " ", "|": "\\|", "<": "&lt;", ">": "&gt;", "`": "'"})


def job_records(weights: str | os.PathLike) -> dict:
    """What the job folder holding `weights` says about them: {"checkpoint": ...,
    "state": job_state(...)}, or {} when the folder's checkpoint is not about
    these very weights (a copied or renamed file, an edited one)."""
    folder = Path(weights).parent
    ckpt = read_json(folder / CHECKPOINT)
    if not isinstance(ckpt, dict) or Path(str(ckpt.get("weights", ""))).name != Path(weights).name:
        return {}
    state = job_state(folder)
    if state.get("state") != "trained" or not state.get("weights_verified"):
        return {}
    return {"checkpoint": ckpt, "state": state}


def _num(v) -> str:
    return "unknown" if not is_finite(v) else f"{v:.4f}" if isinstance(v, float) else str(v)


def _text(v) -> str:
    """A string the card quotes, on one line whatever it holds (every control character and
    line separator escaped: \u2028, \x0b, \x85 ... start a line for some readers), made
    safe (CARD_SAFE) and cut to 200 characters."""
    return printable(str(v)).translate(CARD_SAFE)[:200]


def _front_matter(job: str, tags: list[str], metrics: dict) -> list[str]:
    lines = ["---", "library_name: transformers", "pipeline_tag: text-generation", "tags:"]
    lines += [f"- {t}" for t in tags]
    if metrics:  # model-index: what the Hub shows as evaluation results
        lines += ["model-index:", f"- name: {json.dumps(job)}", "  results:",
                  "  - task:", "      type: text-generation", "    dataset:",
                  "      name: held-out split", "      type: held-out", "    metrics:"]
        for k, v in metrics.items():
            lines += [f"    - type: {k}", f"      value: {json.dumps(v)}"]
    return lines + ["---"]


def model_card(meta: dict, cfg: ModelConfig, tok_kind: str, records: dict) -> str:
    """README.md's text for an export of weights with metadata `meta` and arch `cfg`."""
    ckpt, state = records.get("checkpoint", {}), records.get("state", {})
    job = str(meta.get("job") or ckpt.get("job") or "spark-model")
    metrics = {k: state["eval"][k] for k in METRICS
               if k in state.get("eval", {}) and is_finite(state["eval"][k])}
    corpus = "corpus" if ckpt.get("dataset_kind") or "bpb" in metrics else "pairs"
    tags = ["spark-train", "llama", "causal-lm", "numpy-trained", corpus]
    out = _front_matter(job, tags, metrics)
    out += ["", f"# {_text(job)}", "",
            f"A small Llama-architecture causal language model ({n_params(cfg):,} "
            f"parameters) trained from scratch with Spark Train, a numpy training pipeline "
            f"driven by SPARK_BC programs, then exported with `spark export --to hf`.", "",
            "## Architecture", "",
            "| dim | layers | heads | kv heads | head dim | context | vocab |",
            "|---|---|---|---|---|---|---|",
            f"| {cfg.dim} | {cfg.n_layer} | {cfg.n_head} | {cfg.n_kv_head} | {cfg.head_dim} "
            f"| {cfg.seq_len} | {cfg.vocab} |", "",
            "RMSNorm, RoPE, grouped-query causal attention, SwiGLU; float32 weights, "
            "untied embeddings.", "", "## Training", ""]
    if ckpt:
        seen = ckpt.get("tokens_seen")
        seen = f"{seen:,}" if is_finite(seen) else "an unknown number of"
        out += [f"Job `{_text(job)}`, step {_num(ckpt.get('step_n'))}, "
                f"{_num(ckpt.get('micro_steps'))} micro-steps on {seen} training tokens "
                f"(dataset `{_text(ckpt.get('dataset'))}`, sha256 "
                f"`{_text(ckpt.get('dataset_sha256'))}`); device `{_text(ckpt.get('device'))}`.",
                "",
                f"Training loss {_num(ckpt.get('loss_before'))} -> "
                f"{_num(ckpt.get('loss_after'))} (whole training set, nats per token).", "",
                "| knob | value |", "|---|---|"]
        out += [f"| {k} | {_text(json.dumps(ckpt[k]))} |" for k in KNOBS
                if k in ckpt and (not isinstance(ckpt[k], float) or math.isfinite(ckpt[k]))]
        if ckpt.get("sparkbc_sha256"):
            out += ["", f"Program `{_text(ckpt.get('program'))}` "
                    f"(sha256 `{_text(ckpt['sparkbc_sha256'])}`)."]
    else:
        out += [f"Step {meta.get('step_n')}. The weights were not exported from their job "
                "folder, so the training record (knobs, data, held-out metrics) is not "
                "included; `spark status` on the job folder shows it."]
    out.append("")
    if metrics:
        detail = state.get("eval_detail", {})
        out += ["## Held-out evaluation", "",
                "On rows (or files) never trained on, from the job's eval.json:", "",
                "| metric | value |", "|---|---|"]
        out += [f"| {k} | {_num(v)} |" for k, v in metrics.items()]
        out += [f"| {k} | {_num(detail[k])} |" for k in BASELINES
                if is_finite(detail.get(k))] + [""]
    out += ["## Tokenizer", "", tok_kind, "",
            "## Use it", "", "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            'tok = AutoTokenizer.from_pretrained("PATH")   # this folder',
            'model = AutoModelForCausalLM.from_pretrained("PATH")',
            'ids = tok("hi", return_tensors="pt")',
            "out = model.generate(**ids, max_new_tokens=32)",
            "print(tok.decode(out[0, ids.input_ids.shape[1]:], skip_special_tokens=True))",
            "```", ""]
    if ckpt.get("weights_sha256"):
        out += [f"Spark weights sha256 `{_text(ckpt['weights_sha256'])}`; "
                "`spark import --from hf` gives back the same bytes.", ""]
    return "\n".join(out)


def tokenizer_kind(tok_text: str, ckpt: dict) -> str:
    """A few sentences on the tokenizer, from tokenizer.json itself."""
    doc, tok = load_json(tok_text, TOKENIZER), Tokenizer.from_str(tok_text)
    model = doc.get("model") or {}
    kind = ("byte-level (one token per byte, no merges)" if model.get("type") == "BPE"
            and not model.get("merges") else model.get("type", "unknown"))
    name = ckpt.get("tokenizer")
    which = f" (the job's `{name}`)" if isinstance(name, str) else ""
    ids = special_ids(tok_text)
    specials = ", ".join(f"{k.upper()} `{tok.id_to_token(i)}` (id {i})" for k, i in ids.items())
    wraps = ("; `tok(prompt)` wraps a prompt as BOS prompt SEP, as `spark generate` does"
             if (doc.get("post_processor") or {}).get("type") == "TemplateProcessing" else "")
    return (f"`tokenizer.json`{which}: a {kind} tokenizer of "
            f"{tok.get_vocab_size(with_added_tokens=True):,} tokens; {specials}{wraps}. "
            f"Generation stops at EOS.")

SPECIALS = {BOS: "<|bos|>", SEP: "<|sep|>", EOS: "<|eos|>"}
# One merge that never fires (0xFD twice; UTF-8 text never holds 0xFD): the gguf writer
# refuses an empty array and llama.cpp a BPE vocab without merges (docs/export.md).
GGUF_NULL_MERGE = "ý ý"
GGUF_NORMAL, GGUF_CONTROL = 1, 3     # llama.cpp token types
# llama.cpp's name for GPT-2's split (the regex of `tokenizers`' ByteLevel pre-tokenizer,
# which the project's BPE uses; "default" would split digits by three and punctuation
# apart). No `seperator_token_id` key is written: llama-cpp-python appends that token to
# every text prompt; a pairs prompt names its SEP in the text (`hi<|sep|>`).
GGUF_PRE_TOKENIZER = "gpt-2"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))  # the others, in byte order, after the Latin-1 block
    return {b: chr(b) if b in printable else chr(next(extra)) for b in range(256)}


def byte_tokenizer() -> Tokenizer:
    chars = bytes_to_unicode()
    vocab = {SPECIALS.get(b, chars[b]): b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.normalizer = normalizers.ByteLevel()
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(SPECIALS[b], special=True) for b in sorted(SPECIALS)])
    return _spark_template(tok, pairs=True)


def model_tokenizer_json(weights: str | os.PathLike, meta: dict, cfg: ModelConfig,
                         given: str | os.PathLike | None) -> str:
    """The tokenizer.json text an exported model travels with, never a guess: weights that
    record `tokenizer_sha256` take `given` or the one beside them, with that sha256; others
    are a byte-token model: the byte tokenizer, or `given` when its vocabulary fits."""
    recorded = meta.get("tokenizer_sha256")
    if recorded is None:
        if given is None and cfg.vocab != 256:
            raise SparkError(f"{os.fspath(weights)} has a vocab of {cfg.vocab} tokens and "
                             f"records no tokenizer; give the tokenizer.json it was trained "
                             f"with (--tokenizer)")
        return tokenizer_json(cfg, given)
    path = Path(given) if given is not None else Path(weights).parent / TOKENIZER
    if not path.is_file():
        raise SparkError(f"{os.fspath(weights)} was trained with a tokenizer (sha256 "
                         f"{str(recorded)[:12]}...) but there is no {path}; give the job's "
                         f"tokenizer.json with --tokenizer")
    tok, _ = read_tokenizer(path, recorded, os.fspath(weights))  # the sha256 checked first
    if tok.kind == "byte":   # a corpus job on bytes: the HF byte tokenizer
        return tokenizer_json(cfg, None)
    return with_spark_template(tokenizer_json(cfg, path), pairs=trained_on(meta).prompted)


def with_spark_template(tok_text: str, *, pairs: bool) -> str:
    """A job's BPE tokenizer.json with the ids `spark generate` puts around a prompt as its
    post-processor ([BOS] prompt [SEP] for a pairs model, [BOS] prompt for a corpus model)."""
    return _spark_template(Tokenizer.from_str(tok_text), pairs=pairs).to_str(pretty=True) + "\n"


def _spark_template(tok: Tokenizer, *, pairs: bool) -> Tokenizer:
    bos, sep = SPECIALS[BOS], SPECIALS[SEP]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {sep}" if pairs else f"{bos} $A",
        special_tokens=[(bos, tok.token_to_id(bos)), (sep, tok.token_to_id(sep))])
    return tok


def tokenizer_json(cfg: ModelConfig, path: str | os.PathLike | None) -> str:
    """The tokenizer.json text: the byte tokenizer, or the file at `path` checked
    against the model's vocabulary."""
    if path is None:
        return byte_tokenizer().to_str()
    text = read_input(path, "tokenizer").decode("utf-8", errors="replace")
    try:
        tok = Tokenizer.from_str(text)
    except Exception as err:  # the library raises its own types for every parse error
        raise SparkError(f"{os.fspath(path)} is not a tokenizers tokenizer.json "
                         f"({first_line(err)})") from None
    size = tok.get_vocab_size(with_added_tokens=True)
    if size != cfg.vocab:
        raise SparkError(f"{os.fspath(path)} has {size} tokens but the weights' vocab is "
                         f"{cfg.vocab}; give the tokenizer the model was trained with")
    return text


def special_ids(tok_text: str) -> dict[str, int]:
    """bos/sep/eos ids: the tokenizer's `<|bos|>`-style tokens, else the byte values."""
    tok = Tokenizer.from_str(tok_text)
    return {name: byte if (found := tok.token_to_id(SPECIALS[byte])) is None else found
            for name, byte in (("bos", BOS), ("sep", SEP), ("eos", EOS))}


def tokenizer_config(tok_text: str, cfg: ModelConfig) -> dict:
    """tokenizer_config.json for transformers' AutoTokenizer (the fast tokenizer)."""
    tok = Tokenizer.from_str(tok_text)
    # model_input_names: a Llama takes no token_type_ids, which a template post-processor
    # would otherwise hand to `model.generate(**tok(prompt))`
    conf = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.seq_len,
            "clean_up_tokenization_spaces": False, "padding_side": "left",
            "model_input_names": ["input_ids", "attention_mask"]}
    conf.update({f"{name}_token": tok.id_to_token(i) for name, i in special_ids(tok_text).items()})
    conf["pad_token"] = conf["eos_token"]   # Spark pads with EOS too
    return conf


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



def check_target(path: str | os.PathLike, force: bool, kind: str, inputs: tuple = ()) -> Path:
    """The output gate (sparktrain/core/gate.py: a new path, or a `kind` output this tool
    wrote, never a device, link, tracked file or one of `inputs`), then: something
    that holds data is replaced only with --force."""
    path = Path(path)
    if not force and not path.is_symlink():  # what holds data needs --force, then the gate
        if path.is_dir() and kind in ("hf", "job") and any(path.iterdir()):
            raise SparkError(f"{os.fspath(path)} exists and is not empty; "
                             "pass --force to replace it")
        elif path.is_file():
            raise SparkError(f"{os.fspath(path)} exists; pass --force to replace it")
    return check_output(path, kind, inputs)


def publish_dir(files: dict[str, bytes], out: Path) -> None:
    """Write files into a fresh folder beside `out`, then swap it in; a write error (disk
    full, a name too long, a parent that is a file) is one line, the temp folder gone."""
    with _one_line(out), folder_fd(out.parent, create=True) as fd:
        remove_stale(out, fd)
        tmp = _temp_name(out, fd, ".tmp", folder=True)
        try:
            tfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                for name, data in sorted(files.items()):
                    write_at(tfd, name, data)
            finally:
                os.close(tfd)
            _swap_in(fd, tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True, dir_fd=fd)
            raise


def publish_file(write, out: Path) -> None:
    """`write(tmp_path)` writes the file aside; then it replaces `out`. Errors as publish_dir.
    `write` gets the temp file's name through the folder's descriptor (/proc/self/fd/N/NAME),
    so it writes into the folder opened without following a link, whatever the path becomes."""
    with _one_line(out), folder_fd(out.parent, create=True) as fd:
        remove_stale(out, fd)
        tmp = _temp_name(out, fd, ".tmp", folder=False)
        proc = f"/proc/self/fd/{fd}"  # a path to tmp in the folder fd that no link can redirect
        try:
            write(f"{proc}/{tmp}" if os.path.isdir(proc) else tmp)
            own = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
            try:  # the written temp file reaches the disk before it replaces anything
                os.fsync(own)
            finally:
                os.close(own)
            st = os.stat(tmp, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise SparkError(f"cannot write {os.fspath(out)}: its temp file was replaced "
                                 "while it was written")
            _swap_in(fd, tmp, out)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)
            raise


@contextlib.contextmanager
def _one_line(out: Path):
    try:
        yield
    except OSError as err:
        why = write_error(out, err) if err.errno else (  # a short write reported without errno
            f"cannot write {os.fspath(out)}: {err}: a short write (the disk is full or the "
            "file-size limit is reached)")
        raise SparkError(f"{why}; nothing was replaced") from None


def _temp_name(out: Path, fd: int, suffix: str, folder: bool) -> str:
    """A new temp folder or empty file ".STEM.PID.xxxxxxxx<suffix>" in the folder `fd` (STEM:
    OUT's name cut to fit beside a 255-byte one, fsutil.temp_stem; the PID tells a later run
    a dead writer's)."""
    for _ in range(100):
        name = f".{temp_stem(out.name)}.{os.getpid()}.{secrets.token_hex(4)}{suffix}"
        try:
            if folder:
                os.mkdir(name, 0o777, dir_fd=fd)  # the umask applies
            else:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                                 0o666, dir_fd=fd))
            return name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temp name", os.fspath(out))


def remove_stale(out: Path, fd: int) -> None:
    """Temp files and folders of earlier runs writing this OUT that were killed (their
    process is gone): only our own name pattern, only beside OUT (the folder `fd`)."""
    pattern = re.compile(re.escape(f".{temp_stem(out.name)}.")
                         + r"(\d+)\.[A-Za-z0-9_]+\.(tmp|old)$")
    for entry in os.scandir(fd):
        match = pattern.match(entry.name)
        if not match or _alive(int(match.group(1))):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.name, ignore_errors=True, dir_fd=fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        pass
    return True


def _swap_in(fd: int, new: str, out: Path) -> None:
    """Rename the temp `new` over `out`, both in the folder `fd`; an existing folder is
    moved aside first and removed after (never followed: no link is involved)."""
    try:
        st = os.stat(out.name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    new_is_dir = stat.S_ISDIR(os.stat(new, dir_fd=fd, follow_symlinks=False).st_mode)
    if st is None or (stat.S_ISREG(st.st_mode) and not new_is_dir):
        os.rename(new, out.name, src_dir_fd=fd, dst_dir_fd=fd)
        return
    if stat.S_ISLNK(st.st_mode):
        raise SparkError(f"refusing to replace {os.fspath(out)}: it became a symbolic link "
                         "after it was checked; nothing was replaced")
    old = _temp_name(out, fd, ".old", folder=True)
    os.rename(out.name, f"{old}/x", src_dir_fd=fd, dst_dir_fd=fd)
    os.rename(new, out.name, src_dir_fd=fd, dst_dir_fd=fd)
    shutil.rmtree(old, ignore_errors=True, dir_fd=fd)
