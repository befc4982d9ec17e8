"""Hugging Face folders: export (config.json carries the `spark` metadata, beside the
tokenizer and the model card; a Llama, or the Spark architecture's own code for a model with
options) and import of a Llama, which gives back the same bytes (docs/export.md)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import save as save_safetensors

from sparktrain.core.errors import SparkError, first_line, printable
from sparktrain.core.fsutil import canonical_json, read_input
from sparktrain.core.gate import check_target
from sparktrain.core.jobfiles import TOKENIZER
from sparktrain.core.publish import publish_dir, publish_file
from sparktrain.core.safeload import load_json_file
from sparktrain.core.values import integral, is_finite
from sparktrain.export.card import CARD_FILE, job_records, model_card, tokenizer_kind
from sparktrain.export.names import HF_ARCHS, QK_NORMS, hf_arch, name_map, require_attention
from sparktrain.export.spark_arch import (ARCHITECTURE, code_files,
                                         spark_config as spark_arch_config)
from sparktrain.export.tokenizer import model_tokenizer_json, special_ids, tokenizer_config
from sparktrain.model.config import OPTION_DEFAULTS, ModelConfig, param_shapes
from sparktrain.model.memory import weights_fits
from sparktrain.model.layers import RMS_EPS, ROPE_BASE
from sparktrain.model.weights import (check_params, check_tensors, config_from_meta, load_model,
                                      read_tensors, weights_bytes)

META_FIELD = "spark_metadata"   # config.json key holding the weights' `spark` metadata
MODEL_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
IGNORED_SUFFIX = "rotary_emb.inv_freq"   # a buffer some checkpoints save; derived, not learned
MAX_SHARDS = 1024


# what config.json says beside the Llama fields, by hf_arch: Arcee's MLP is relu^2 without a
# gate; Qwen 3 norms q and k per head (its weights written as ones) and slides no window
ARCH_FIELDS = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "arcee": {"architectures": ["ArceeForCausalLM"], "model_type": "arcee",
              "hidden_act": "relu2"},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
              "use_sliding_window": False, "sliding_window": None}}


def hf_config(cfg: ModelConfig, meta: dict, ids: dict[str, int], arch: str = "llama") -> dict:
    """config.json of a LlamaForCausalLM (or Arcee, Qwen 3: ARCH_FIELDS) that computes
    exactly the Spark forward."""
    return {**_llama_fields(cfg, meta, ids), **ARCH_FIELDS[arch]}


def _llama_fields(cfg: ModelConfig, meta: dict, ids: dict[str, int]) -> dict:
    return {
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
    """The ModelConfig of a Llama config.json (or of the Spark architecture's, options
    included), or one line saying what does not fit."""
    get = conf.get
    architectures = get("architectures") or []
    if not isinstance(architectures, list):
        raise SparkError(f"{where}: architectures must be a list of class names, "
                         f"got {type(architectures).__name__}")
    kind = get("model_type")
    options = _options_of(conf, architectures, where)
    for key in ("attention_bias", "mlp_bias"):
        if get(key):
            raise SparkError(f"{where}: {key} is true; Spark layers have no bias terms")
    if get("tie_word_embeddings", False):
        raise SparkError(f"{where}: tie_word_embeddings is true; Spark's lm_head is untied")
    act = "relu2" if kind == "arcee" else "silu"
    if get("hidden_act", act) != act:
        raise SparkError(f"{where}: hidden_act {get('hidden_act')!r}; Spark's MLP is "
                         f"{'relu^2' if kind == 'arcee' else 'SwiGLU'} ({act})")
    _check_rope(conf, where)
    eps = get("rms_norm_eps", 1e-6)
    if not _close(eps, RMS_EPS):
        raise SparkError(f"{where}: rms_norm_eps {eps!r}; Spark's RMSNorm uses {RMS_EPS}")
    dim, layers, heads, seq_len, vocab = (integral(get(key)) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings",
        "vocab_size"))
    kv = get("num_key_value_heads")
    kv = heads if kv is None else integral(kv)  # 0 is a shape to refuse, not "unset"
    if None in (dim, layers, heads, seq_len, vocab, kv):
        raise SparkError(f"{where}: hidden_size, num_hidden_layers, num_attention_heads, "
                         "num_key_value_heads, max_position_embeddings and vocab_size must be "
                         "integers")
    cfg = ModelConfig(dim=dim, n_layer=layers, n_head=heads, n_kv_head=kv, seq_len=seq_len,
                      vocab=vocab, **options)
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


def _options_of(conf: dict, architectures: list, where: str) -> dict:
    """The options a folder's architecture computes: the Spark architecture names its own,
    Arcee and Qwen 3 each have one (names.HF_ARCHS), a Llama none; else one line."""
    kind = conf.get("model_type")
    if kind == "spark" and architectures == [ARCHITECTURE]:
        return {k: conf.get(k, default) for k, default in OPTION_DEFAULTS.items()}
    if kind in ("arcee", "qwen3"):
        if conf.get("use_sliding_window"):
            raise SparkError(f"{where}: use_sliding_window is true; Spark attends to the "
                             "whole window")
        return dict(next(k for k, v in HF_ARCHS.items() if v == kind))
    if kind != "llama" and "LlamaForCausalLM" not in architectures:
        raise SparkError(f"{where}: model_type {kind!r} is not llama")
    return {}


def _close(value, want: float) -> bool:
    """A finite JSON number within 1e-12 of `want` (NaN and an integer past float range
    are not close to anything)."""
    return is_finite(value) and abs(value - want) <= 1e-12


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
    require_attention(cfg, weights, "hf")
    tok_text = model_tokenizer_json(weights, meta, cfg, tokenizer)
    ids = special_ids(tok_text)
    names = name_map(cfg, "hf")
    tensors = {names[n]: np.ascontiguousarray(params[n], dtype=np.float32) for n in names}
    # an architecture of transformers where one computes the model, else the Spark one's code
    arch = hf_arch(cfg)
    conf = {**spark_arch_config(cfg, ids), META_FIELD: meta} if arch == "spark" else \
        hf_config(cfg, meta, ids, arch)
    if arch == "qwen3":
        tensors |= {norm.format(L=L): np.ones(cfg.head_dim, np.float32)
                    for L in range(cfg.n_layer) for norm in QK_NORMS["hf"]}
    files = {
        **(code_files() if arch == "spark" else {}),
        "config.json": canonical_json(conf).encode(),
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

def import_hf(folder: str | os.PathLike, out: str | os.PathLike, force: bool = False) -> dict:
    """Read a Llama folder (or a Spark architecture's) and write Spark weights; returns
    the metadata written."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SparkError(f"{os.fspath(folder)} is not a folder; give the Hugging Face model "
                         "folder")
    out = check_target(out, force, "safetensors", inputs=(folder,))
    conf = _json_object(folder / "config.json", "config.json")
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


def _json_object(path: Path, what: str) -> dict:
    obj = load_json_file(path, what)  # no NaN, bounded depth
    if not isinstance(obj, dict):
        raise SparkError(f"{os.fspath(path)} is not a JSON object")
    return obj


def _shard_files(folder: Path) -> list[Path]:
    """The shard files an index names, each a plain file directly in `folder`."""
    index = os.fspath(folder / INDEX_FILE)
    weight_map = _json_object(folder / INDEX_FILE, "index").get("weight_map")
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
    norms = {n.format(L=L) for L in range(cfg.n_layer) for n in QK_NORMS["hf"]}
    for hf in sorted(norms & set(hf_tensors)):  # Qwen 3's: ones, as Spark's weightless norm
        if not cfg.qk_norm or not np.array_equal(hf_tensors.pop(hf), np.ones(cfg.head_dim)):
            raise SparkError(f"{os.fspath(folder)}: tensor {hf} is not {cfg.head_dim} ones; "
                             "Spark's q/k norm has no weight")
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
