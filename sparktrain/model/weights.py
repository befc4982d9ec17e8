"""weights.safetensors: F32 tensors under their names (docs/model.md "Tensors") plus ONE metadata
key, `spark`, of canonical JSON: the safetensors writer orders several keys differently
from run to run."""
from __future__ import annotations

import json
import math
import os

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load, save

from sparktrain.core.errors import SparkError, first_line
from sparktrain.core.fsutil import atomic_write_bytes, read_input
from sparktrain.model.config import REQUIRED_ARCH, ModelConfig, param_shapes
from sparktrain.core.safeload import load_json

META_KEY = "spark"


def weights_bytes(params: dict[str, np.ndarray], meta: dict) -> bytes:
    tensors = {name: np.ascontiguousarray(a, dtype=np.float32) for name, a in params.items()}
    text = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    return save(tensors, metadata={META_KEY: text})


def save_weights(path: str | os.PathLike, params: dict[str, np.ndarray], meta: dict) -> bytes:
    """Write atomically; returns the bytes written (so callers can hash them)."""
    data = weights_bytes(params, meta)
    atomic_write_bytes(path, data)
    return data


# the one safetensors reader's dtypes: the floats that convert to float32 exactly
FLOAT_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


_NUMPY = {"F64": "float64", "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
          "U8": "uint8", "BOOL": "bool"}  # safetensors' names as numpy says them


def read_tensors(data: bytes, where, accept=tuple(FLOAT_DTYPES)) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file as float32 (F16 and BF16 converted exactly);
    a dtype outside `accept` is one line naming it and what is accepted."""
    header = _header(data)
    dtypes = {n: t.get("dtype") if isinstance(t, dict) else None
              for n, t in header.items() if n != "__metadata__"}
    for name, dtype in sorted(dtypes.items()):
        if dtype not in accept:
            raise SparkError(f"{os.fspath(where)}: tensor {name} is {_NUMPY.get(dtype, dtype)}; "
                             f"Spark weights are F32 (accepted: {', '.join(accept)}, "
                             "converted exactly)")
    if "BF16" not in dtypes.values():
        return {n: np.ascontiguousarray(a, dtype=np.float32) if a.dtype != np.float32 else a
                for n, a in load(data).items()}
    body = memoryview(data)[8 + int.from_bytes(data[:8], "little"):]
    return {name: _decode(name, header[name], body) for name in dtypes}


def _decode(name: str, info: dict, body) -> np.ndarray:
    """One tensor by hand (numpy has no bfloat16: its 16 bits are float32's top half)."""
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
            and isinstance(offsets, list) and len(offsets) == 2
            and all(isinstance(o, int) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= len(body)):
        raise ValueError(f"tensor {name}: malformed shape or data_offsets")
    code = FLOAT_DTYPES[info["dtype"]]
    count = math.prod(shape)
    if offsets[1] - offsets[0] != count * np.dtype(code).itemsize:
        raise ValueError(f"tensor {name}: data_offsets do not match its shape")
    raw = np.frombuffer(body[offsets[0]:offsets[1]], dtype=code)
    if info["dtype"] == "BF16":
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32).reshape(shape)


def load_weights(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Read a Spark weights file: (params as float32, the `spark` metadata dict)."""
    data = read_input(path, "weights file")
    try:
        tensors = read_tensors(data, path)
        meta = _metadata(data)
    except (SafetensorError, ValueError) as err:  # JSON and UTF-8 errors are ValueErrors
        raise SparkError(f"{path} is not a safetensors file ({first_line(err)})") from None
    if META_KEY not in meta:
        raise SparkError(f"{path} is a safetensors file but not Spark weights "
                         f"(no '{META_KEY}' metadata key)")
    try:
        spark_meta = load_json(meta[META_KEY], f"{path}: metadata")
    except (ValueError, RecursionError, SparkError, TypeError):
        raise SparkError(f"{path}: the '{META_KEY}' metadata is not JSON") from None
    if not isinstance(spark_meta, dict):
        raise SparkError(f"{path}: the '{META_KEY}' metadata must be a JSON object, "
                         f"got {type(spark_meta).__name__}")
    check_tensors(tensors, path)
    return dict(tensors), spark_meta


def check_tensors(tensors: dict[str, np.ndarray], path="weights") -> None:
    """The one check every weights reader shares: F32 only (no silent casts of
    int or bool tensors) and every value finite (NaN weights generate garbage)."""
    for name, a in tensors.items():
        if a.dtype != np.float32:
            raise SparkError(f"{path}: tensor {name} is {a.dtype}; Spark weights are F32 only")
        if not np.isfinite(a).all():
            raise SparkError(f"{path}: tensor {name} holds NaN or infinite values; "
                             "these weights come from a diverged run")


def load_model(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], ModelConfig, dict]:
    """(params, cfg, meta) of a Spark weights file, checked against its own arch."""
    params, meta = load_weights(path)
    cfg = config_from_meta(meta, path)
    check_params(params, cfg, path)
    return params, cfg, meta


def config_from_meta(meta: dict, path: str | os.PathLike = "weights") -> ModelConfig:
    arch = meta.get("arch")
    if not isinstance(arch, dict):
        raise SparkError(f"{path}: metadata has no 'arch' object")
    missing = [name for name in REQUIRED_ARCH if name not in arch]
    if missing:
        raise SparkError(f"{path}: arch in metadata lacks {', '.join(missing)}")
    if not isinstance(arch["train_attn"], bool):
        raise SparkError(f"{path}: arch train_attn must be true or false, "
                         f"got {arch['train_attn']!r}")
    try:
        return ModelConfig.from_dict(arch).validate()
    except TypeError as err:
        raise SparkError(f"{path}: bad arch in metadata ({err})") from None


def check_params(params: dict[str, np.ndarray], cfg: ModelConfig, path="weights") -> None:
    """Every tensor of the config present with its exact shape, nothing extra."""
    want = param_shapes(cfg)
    missing = [n for n in want if n not in params]
    if missing:
        raise SparkError(f"{path} lacks tensor {missing[0]}"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    for name, shape in want.items():
        if tuple(params[name].shape) != shape:
            raise SparkError(f"{path}: tensor {name} has shape {tuple(params[name].shape)}, "
                             f"expected {shape}")
    extra = sorted(set(params) - set(want))
    if extra:
        raise SparkError(f"{path} has unexpected tensor {extra[0]} for arch {cfg.to_dict()}")


def _header(data: bytes) -> dict:
    if len(data) < 8:
        raise ValueError("file shorter than the 8-byte header length")
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise ValueError("header length runs past the end of the file")
    try:
        header = load_json(data[8:8 + n], "the safetensors header")
    except SparkError as err:
        raise ValueError(str(err)) from None
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    return header


def _metadata(data: bytes) -> dict:
    meta = _header(data).get("__metadata__", {}) or {}
    if not isinstance(meta, dict):
        raise ValueError("__metadata__ is not a JSON object")
    return meta
