"""The array backend (docs/gpu.md): the operations the array API standard lacks, as twins
of one name in NumpyOps (the fast CPU path: the reference bytes) and ArrayApiOps (standard
calls only, no scatter: deterministic on a GPU); and the Device a run's arrays live on."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from sparktrain import runtime
from sparktrain.core.errors import SparkError
from sparktrain.model.config import DEVICES

try:  # the `gpu` extra: PyTorch / CuPy arrays get their namespace from it
    import array_api_compat
except ImportError:  # pragma: no cover - the default install
    array_api_compat = None
INSTALL = "install the gpu extra: pip install -e '.[gpu]'"
# a device comes from a flag or from params.yaml: the message names both
ASKED = "--device {0} (or step.device: {0})"


class NumpyOps:
    """numpy arrays: the CPU path."""
    xp = np
    name = "numpy"

    def asarray(self, host, like=None, dtype=None):
        """A host array in this backend (on the device of `like`), of `dtype` if given."""
        return np.asarray(host, dtype=dtype)

    def constant(self, host: np.ndarray, like):
        """A read-only host table (rope, mask) where `like` lives: numpy needs no copy."""
        return host

    def to_host(self, x) -> np.ndarray:
        return x

    def host_dtype(self, x):
        """The numpy dtype that matches x's dtype (host-side bookkeeping in the same precision)."""
        return x.dtype

    def f32(self, value: float):
        """A float32 scalar as this backend multiplies arrays by it: np.float32."""
        return np.float32(value)

    def last_rows(self, logits, lens):
        """(A, T, V) and host (A,) lengths -> host (A, V): each row's own last position."""
        return logits[np.arange(len(lens)), lens - 1]

    def max_rowdots(self, qs, k):
        """(max |q|^2, max |k|^2) as floats: here the read-back is free."""
        return float(np.max(self.rowdot(qs, qs))), float(np.max(self.rowdot(k, k)))

    def zeros(self, shape, like):
        return np.zeros(shape, dtype=like.dtype)

    def ones(self, shape, like):
        return np.ones(shape, dtype=like.dtype)

    def copy(self, x):
        return x.copy()

    def load(self, dst, src):
        """dst's contents replaced by the host array src; returns the array to keep."""
        dst[...] = src
        return dst

    def astype(self, x, dtype):
        return x.astype(dtype)

    def permute(self, x, axes):
        return x.transpose(axes)

    def contiguous(self, x):
        return np.ascontiguousarray(x)

    def mT(self, x):
        return x.swapaxes(-1, -2)

    def concat(self, arrays, axis=0):
        return np.concatenate(arrays, axis=axis)

    def rowdot(self, a, b):
        """sum(a * b, -1): (..., C) x (..., C) -> (...)."""
        return np.einsum("...c,...c->...", a, b)

    def coldot(self, a, b):
        """sum(a * b, 0): (N, C) x (N, C) -> (C,)."""
        return np.einsum("nc,nc->c", a, b)

    def pool(self, w, x):
        """sum_t w[b, t] x[b, t]: (B, T) x (B, T, C) -> (B, C)."""
        return np.einsum("bt,btc->bc", w, x)

    def at_least(self, x, low):
        return np.maximum(x, low)

    def weighted_sum(self, w, x) -> float:
        """sum(w * x) accumulated in float64 on the host: (N,) x (N,) -> float."""
        return float(np.dot(w.astype(np.float64), x.astype(np.float64)))

    def global_norm(self, tensors) -> float:
        """sqrt(sum of sum(g * g)): each tensor's sum in its dtype, the total in float64."""
        return float(np.sqrt(sum(float(np.dot(g.ravel(), g.ravel())) for g in tensors)))

    def exp_(self, x):
        """exp(x), overwriting x where the backend can."""
        return np.exp(x, out=x)

    def scaled(self, x, s):
        """x * s as a fresh C-ordered array (x may be a strided view)."""
        return np.multiply(x, s, out=np.empty(x.shape, x.dtype))

    def add_as(self, x, shape, y):
        """x + y with x viewed as `shape` for the broadcast (x overwritten where possible)."""
        x.reshape(shape)[...] += y
        return x

    def sigmoid(self, g):
        sig = np.negative(g)
        np.exp(sig, out=sig)
        sig += 1
        np.reciprocal(sig, out=sig)
        return sig

    def rotate_pairs(self, u, cos, sin, inverse=False):
        """u (2, ...) two planes: (u1 cos - u2 sin, u2 cos + u1 sin); inverse: sin -> -sin."""
        first, second = (np.add, np.subtract) if inverse else (np.subtract, np.add)
        u1, u2 = u[0], u[1]
        out = np.empty_like(u)
        tmp = u2 * sin
        np.multiply(u1, cos, out=out[0])
        first(out[0], tmp, out=out[0])
        np.multiply(u1, sin, out=tmp)
        np.multiply(u2, cos, out=out[1])
        second(out[1], tmp, out=out[1])
        return out

    def append_column(self, a, col):
        """[a, col] along the last axis: (..., n) and (...) or a scalar -> (..., n + 1)."""
        n = a.shape[-1]
        out = np.empty(a.shape[:-1] + (n + 1,), dtype=a.dtype)
        out[..., :n] = a
        out[..., n] = col
        return out

    def swiglu_gate_grads(self, da, silu, sig, u):
        """(dg, du) stacked as (2, N, F): du = da silu, dg = da u (sig + silu (1 - sig))."""
        dgu = np.empty((2,) + da.shape, dtype=da.dtype)
        dg, du = dgu[0], dgu[1]
        np.multiply(da, silu, out=du)
        np.subtract(1, sig, out=dg)
        dg *= silu
        dg += sig
        dg *= u
        dg *= da
        return dgu

    def gather_rows(self, weight, ids):
        """weight[ids]: (V, C) and (...) int -> (..., C)."""
        return weight[ids]

    def take_rows(self, x, rows_host):
        """x[rows]: (N, C) and host (M,) int -> (M, C)."""
        return x[rows_host]

    def scatter_rows(self, src, rows_host, n):
        """(n, C) zeros with row rows[i] = src[i]; rows distinct."""
        out = np.zeros((n, src.shape[1]), dtype=src.dtype)
        out[rows_host] = src
        return out

    def pick(self, x, targets):
        """x[i, targets[i]]: (M, V) and (M,) int -> (M,)."""
        return x[np.arange(targets.shape[0]), targets]

    def sub_onehot_(self, x, targets):
        """x - onehot(targets): x[i, targets[i]] -= 1, in place where possible."""
        x[np.arange(targets.shape[0]), targets] -= 1
        return x

    def embedding_grad(self, ids, dout, vocab):
        """sum of the rows of dout (N, C) per id (N,) -> (vocab, C), as a one-hot matmul."""
        onehot = np.zeros((vocab, ids.size), dtype=dout.dtype)   # (V, N)
        onehot[ids, np.arange(ids.size)] = 1
        return onehot @ dout                                     # (V, C)


class ArrayApiOps:
    """Any array-API namespace: standard calls only (array-api-strict runs this path in CI)."""

    def __init__(self, xp):
        self.xp = xp
        self.name = getattr(xp, "__name__", str(xp))
        self._constants: dict[int, tuple] = {}

    def asarray(self, host, like=None, dtype=None):
        device = None if like is None else like.device
        # a read-only host array (a memory-mapped batch) is copied, never shared writable
        copy = True if isinstance(host, np.ndarray) and not host.flags.writeable else None
        return self.xp.asarray(host, dtype=dtype, device=device, copy=copy)

    def constant(self, host: np.ndarray, like):
        """A read-only host table (rope, mask) on like's device, copied there once."""
        key = (id(host), str(like.device), str(like.dtype))
        hit = self._constants.get(key)
        if hit is None:
            hit = self._constants[key] = (host, self.asarray(host, like, like.dtype))
        return hit[1]

    def f32(self, value: float):
        """A Python float of the float32 value: the standard casts it to the array's dtype."""
        return float(np.float32(value))

    def last_rows(self, logits, lens):
        A, T, V = logits.shape
        last = np.arange(A) * T + np.asarray(lens) - 1                 # (A,) host
        return self.to_host(self.take_rows(self.xp.reshape(logits, (A * T, V)), last))

    def max_rowdots(self, qs, k):
        """None: reading a bound back would stall the device's queue once a layer."""
        return None

    def to_host(self, x) -> np.ndarray:
        if isinstance(x, np.ndarray):                          # host already (a step count)
            return x
        if hasattr(x, "get") and not hasattr(x, "cpu"):        # CuPy
            return x.get()
        if hasattr(x, "cpu"):                                  # PyTorch
            return x.detach().cpu().numpy()
        return np.from_dlpack(x)

    def host_dtype(self, x):
        return np.dtype(np.float64) if x.dtype == self.xp.float64 else np.dtype(np.float32)

    def zeros(self, shape, like):
        return self.xp.zeros(shape, dtype=like.dtype, device=like.device)

    def ones(self, shape, like):
        return self.xp.ones(shape, dtype=like.dtype, device=like.device)

    def copy(self, x):
        return self.xp.asarray(x, copy=True)

    def load(self, dst, src):
        return self.asarray(src, dst, dst.dtype)

    def astype(self, x, dtype):
        return self.xp.astype(x, dtype)

    def permute(self, x, axes):
        return self.xp.permute_dims(x, axes)

    def contiguous(self, x):
        return x

    def mT(self, x):
        return self.xp.matrix_transpose(x)

    def concat(self, arrays, axis=0):
        return self.xp.concat(arrays, axis=axis)

    def rowdot(self, a, b):
        return self.xp.sum(a * b, axis=-1)

    def coldot(self, a, b):
        return self.xp.sum(a * b, axis=0)

    def pool(self, w, x):
        return (w[:, None, :] @ x)[:, 0, :]

    def at_least(self, x, low):
        return self.xp.maximum(x, self.xp.full_like(x, low))

    def weighted_sum(self, w, x) -> float:
        return float(np.dot(self.to_host(w).astype(np.float64), self.to_host(x).astype(np.float64)))

    def global_norm(self, tensors) -> float:
        xp = self.xp
        squares = xp.stack([xp.sum(g * g) for g in tensors])  # one transfer, not one per tensor
        return float(np.sqrt(sum(float(s) for s in self.to_host(squares))))

    def exp_(self, x):
        return self.xp.exp(x)

    def scaled(self, x, s):
        return x * s

    def add_as(self, x, shape, y):
        xp = self.xp
        return xp.reshape(xp.reshape(x, shape) + y, x.shape)

    def sigmoid(self, g):
        return 1.0 / (1.0 + self.xp.exp(-g))

    def rotate_pairs(self, u, cos, sin, inverse=False):
        u1, u2 = u[0, ...], u[1, ...]
        if inverse:
            return self.xp.stack([u1 * cos + u2 * sin, u2 * cos - u1 * sin])
        return self.xp.stack([u1 * cos - u2 * sin, u2 * cos + u1 * sin])

    def append_column(self, a, col):
        xp = self.xp
        if isinstance(col, (int, float)):
            col = xp.full(a.shape[:-1], float(col), dtype=a.dtype, device=a.device)
        return xp.concat([a, col[..., None]], axis=-1)

    def swiglu_gate_grads(self, da, silu, sig, u):
        du = da * silu
        dg = (1 - sig) * silu
        dg += sig
        dg *= u
        dg *= da
        return self.xp.stack([dg, du])

    def gather_rows(self, weight, ids):
        xp = self.xp
        flat = xp.take(weight, xp.reshape(ids, (-1,)), axis=0)         # (N, C)
        return xp.reshape(flat, tuple(ids.shape) + (weight.shape[1],))

    def take_rows(self, x, rows_host):
        return self.xp.take(x, self.asarray(np.asarray(rows_host, dtype=np.int64), x), axis=0)

    def scatter_rows(self, src, rows_host, n):
        # a gather from [src; 0]: row r reads src[i] where rows[i] = r, else the zero row
        xp = self.xp
        rows = np.asarray(rows_host, dtype=np.int64)
        source = np.full(n, rows.shape[0], dtype=np.int64)              # (n,) -> the zero row
        source[rows] = np.arange(rows.shape[0])
        padded = xp.concat([src, self.zeros((1, src.shape[1]), src)], axis=0)  # (M + 1, C)
        return xp.take(padded, self.asarray(source, src), axis=0)

    def _onehot(self, targets, vocab, like):
        xp = self.xp
        classes = xp.arange(vocab, dtype=targets.dtype, device=targets.device)
        return xp.astype(targets[:, None] == classes[None, :], like.dtype)  # (M, V)

    def pick(self, x, targets):
        xp = self.xp
        M, V = x.shape
        flat = xp.arange(M, dtype=targets.dtype, device=targets.device) * V + targets
        return xp.take(xp.reshape(x, (-1,)), flat, axis=0)

    def sub_onehot_(self, x, targets):
        return x - self._onehot(targets, x.shape[1], x)

    def embedding_grad(self, ids, dout, vocab):
        # the one-hot matmul, no scatter: deterministic on any device
        return self.xp.matrix_transpose(self._onehot(ids, vocab, dout)) @ dout  # (V, C)


NUMPY = NumpyOps()
_GENERIC: dict[int, ArrayApiOps] = {}


def namespace(x):
    """The array-API namespace of x: its own, or array-api-compat's wrapper (PyTorch)."""
    if hasattr(x, "__array_namespace__"):
        return x.__array_namespace__()
    if array_api_compat is None:
        raise TypeError(f"no array namespace for {type(x).__name__}: {INSTALL}")
    return array_api_compat.array_namespace(x)


def for_namespace(xp):
    """The ops of namespace xp (numpy itself gets the fast path)."""
    if xp is np:
        return NUMPY
    if id(xp) not in _GENERIC:
        _GENERIC[id(xp)] = ArrayApiOps(xp)
    return _GENERIC[id(xp)]


def of(x):
    """The ops for arrays like x: NumpyOps for numpy, ArrayApiOps for anything else."""
    if isinstance(x, (np.ndarray, np.generic)):
        return NUMPY
    return for_namespace(namespace(x))


def of_params(params: dict):
    return of(next(iter(params.values())))


CUBLAS_WORKSPACE = ":4096:8"  # what PyTorch's deterministic cuBLAS needs set before its first call


@dataclass(frozen=True)
class Device:
    kind: str                      # cpu | cuda | mps
    name: str                      # recorded in checkpoint/weights: cpu, cuda:<GPU name>, mps
    xp: object                     # the array namespace
    note: str = ""                 # one line for the log: what `auto` picked and why
    torch_device: object = None
    sync: Callable[[], None] = field(default=lambda: None)  # wait for queued work (timing)

    @property
    def ops(self):
        return for_namespace(self.xp)

    def to_device(self, tensors: dict) -> dict:
        """Host arrays -> this device (numpy: the same arrays, nothing copied)."""
        if self.host:
            return tensors
        return {n: self.xp.asarray(np.ascontiguousarray(a), device=self.torch_device)
                for n, a in tensors.items()}

    def to_host(self, tensors: dict) -> dict[str, np.ndarray]:
        """Arrays on this device -> host numpy (the weights file, the optimizer state)."""
        return {n: np.ascontiguousarray(self.ops.to_host(a)) for n, a in tensors.items()}

    @property
    def host(self) -> bool:
        """Arrays in this process's memory (numpy): worker processes can share them."""
        return self.kind == "cpu"

    def record(self) -> dict:
        """The fingerprint's and weights metadata's device: nothing on the CPU (the default
        job's bytes predate devices), else its name."""
        return {} if self.host else {"device": self.name}

    def made_with(self) -> dict:
        """checkpoint.json's BLAS kernel family and numpy / BLAS versions; nothing on a GPU."""
        return {"made_with": runtime.made_with()} if self.host else {}

    def kernel_record(self) -> dict:
        """perf.json's kernel fields: the family that ran and who chose it."""
        if not self.host:
            return {}
        return {"blas_kernel": runtime.made_with()["kernel"],
                "blas_kernel_source": runtime.start().source}

    def kernel_note(self) -> str | None:
        """One line when a CPU run uses a kernel family other than the portable one (said
        at import instead when numpy was loaded first)."""
        if not self.host or runtime.start().source == "preloaded":
            return None
        return runtime.note(runtime.start())

    def workers(self, requested: int | None) -> int | None:
        """Gradient processes: the CPU's `requested` (None: the usable cores); a GPU runs
        its shards one after another in this process."""
        return requested if self.host else 1

    def check_workers(self, workers: int | None) -> None:
        """SparkError (one line) when worker processes are asked of a GPU."""
        if workers and not self.host:
            raise SparkError(f"--workers times CPU worker processes; {self.name} runs one "
                             "process (drop --workers or use --device cpu)")

    def matmul_peak(self, fresh: bool = False) -> float:
        """Best float32 matmul FLOP/s here, MFU's denominator; measured once a process
        (`fresh`: again, as spark bench does before its timed steps)."""
        if fresh or self.name not in _PEAKS:
            _PEAKS[self.name] = host_matmul_peak() if self.host else device_matmul_peak(self)
        return _PEAKS[self.name]

    def is_out_of_memory(self, err: BaseException) -> bool:
        """Whether `err` is a GPU out of memory (PyTorch's OutOfMemoryError, or the
        RuntimeError of MPS / older releases); never on the CPU (check_fits refuses first)."""
        if self.host:
            return False
        return (type(err).__name__ == "OutOfMemoryError"
                or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower()))


_PEAKS: dict[str, float] = {}


def _best_rate(matmul, n: int, repeats: int, sync=lambda: None) -> float:
    """Best FLOP/s of `repeats` timed n x n matmuls, after one that warms kernels and pages."""
    matmul()
    sync()
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        matmul()
        sync()
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0))
    return best


def host_matmul_peak(sizes=(768, 1024, 1280), repeats=3) -> float:
    """Best float32 FLOP/s of square numpy matmuls around n = 1024, at this process's
    BLAS thread count."""
    rng = np.random.default_rng(0)
    best = 0.0
    for n in sizes:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        c = np.empty((n, n), dtype=np.float32)
        best = max(best, _best_rate(lambda: np.matmul(a, b, out=c), n, repeats))
    return best


def device_matmul_peak(dev: Device, n=4096, repeats=5) -> float:
    """Best float32 FLOP/s of an n x n matmul on a GPU device (waits for each to finish)."""
    rng = np.random.default_rng(0)
    a, b = (dev.xp.asarray(rng.standard_normal((n, n), dtype=np.float32),
                           device=dev.torch_device) for _ in range(2))
    return _best_rate(lambda: a @ b, n, repeats, dev.sync)


CPU = Device("cpu", "cpu", np)


def _import_gpu():
    """(torch, its array-api namespace), or ImportError without the gpu extra."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    import torch
    import array_api_compat.torch as xp
    return torch, xp


def _gpu(torch, xp, kind: str, auto: bool = False) -> Device:
    """A GPU Device, with PyTorch's deterministic mode on."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False    # full float32 matmuls: CPU-close losses
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    name, sync = ((f"cuda:{torch.cuda.get_device_name(0)}", torch.cuda.synchronize)
                  if kind == "cuda" else ("mps", torch.mps.synchronize))
    return Device(kind, name, xp, note=f"device: {name}" + (" (auto)" if auto else ""),
                  torch_device=torch.device(kind), sync=sync)


_RESOLVED: dict[str, Device] = {}


def resolve(requested) -> Device:
    """The Device for `requested`, resolved once a process (the command line asks first);
    SparkError (one line, exit 2) when it cannot be had."""
    if not isinstance(requested, str) or requested not in DEVICES:
        raise SparkError(f"device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested not in _RESOLVED:
        _RESOLVED[requested] = _resolve(requested)
    return _RESOLVED[requested]


def _resolve(requested: str) -> Device:
    if requested == "cpu":
        return CPU
    try:
        torch, xp = _import_gpu()
    except ImportError:
        if requested == "auto":
            return Device("cpu", "cpu", np, note="device: cpu (auto: the gpu extra is not "
                                                 "installed, so no GPU library to ask)")
        raise SparkError(f"{ASKED.format(requested)}: {INSTALL}") from None
    mps_backend = getattr(torch.backends, "mps", None)
    cuda = bool(torch.cuda.is_available())
    mps = bool(mps_backend is not None and mps_backend.is_available())
    if requested == "auto":
        if cuda or mps:
            return _gpu(torch, xp, "cuda" if cuda else "mps", auto=True)
        return Device("cpu", "cpu", np, note=f"device: cpu (auto: PyTorch {torch.__version__} "
                                             "sees no CUDA or MPS device)")
    if requested == "cuda" and not cuda:
        raise SparkError(f"{ASKED.format('cuda')}: PyTorch {torch.__version__} sees no CUDA "
                         "device (no NVIDIA GPU, or a CPU-only PyTorch build); use cpu or auto")
    if requested == "mps" and not mps:
        raise SparkError(f"{ASKED.format('mps')}: PyTorch {torch.__version__} sees no Apple "
                         "MPS device; use cpu or auto")
    return _gpu(torch, xp, requested)
