"""The array backend (docs/gpu.md): the operations the array API standard lacks, as twins
of one name in NumpyOps here (the fast CPU path: the reference bytes) and ArrayApiOps
(model/arrayapi.py: standard calls only, no scatter: deterministic on a GPU), and `of`,
which gives an array the ops of its namespace. The Device a run's arrays live on is
model/device.py."""
from __future__ import annotations

import numpy as np

from sparktrain.model.arrayapi import ArrayApiOps

try:  # the `gpu` extra: PyTorch / CuPy arrays get their namespace from it
    import array_api_compat
except ImportError:  # pragma: no cover - the default install
    array_api_compat = None
INSTALL = "install the gpu extra: pip install -e '.[gpu]'"


class NumpyOps:
    """numpy arrays: the CPU path."""
    xp = np
    name = "numpy"
    writes_out = True  # `out` buffers are filled (the generic twin returns fresh arrays)

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

    def empty(self, shape, like):
        return np.empty(shape, dtype=like.dtype)

    def copy(self, x):
        return x.copy()

    def matmul(self, a, b, out=None):
        """a @ b, written into `out` when given (any strides numpy's BLAS call takes)."""
        return np.matmul(a, b, out=out)

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

    def rows_to_heads(self, y, r, heads):
        """y * r regrouped per head: y (B, KV, G*T, hd), r (B, KV, G*T, 1) -> (B, H, T, hd),
        laid out (B, T, H, hd) in memory, so the heads side by side are a view."""
        B, KV, GT, hd = y.shape
        G = heads // KV
        T = GT // G
        buf = np.empty((B, T, KV, G, hd), dtype=y.dtype)
        np.multiply(y.reshape(B, KV, G, T, hd), r.reshape(B, KV, G, T, 1),
                    out=buf.transpose(0, 2, 3, 1, 4))
        return buf.reshape(B, T, heads, hd).transpose(0, 2, 1, 3)

    def heads_to_rows(self, dy, r, kv):
        """dy (B, H, T, hd) in any layout, regrouped as (B, KV, G*T, hd) and times r
        (B, KV, G*T, 1): one pass, C-ordered."""
        B, H, T, hd = dy.shape
        G = H // kv
        out = np.empty((B, kv, G, T, hd), dtype=dy.dtype)
        np.multiply(dy.reshape(B, kv, G, T, hd), r.reshape(B, kv, G, T, 1), out=out)
        return out.reshape(B, kv, G * T, hd)

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

    def embedding_grad_rows(self, ids, dout, vocab):
        """embedding_grad for a table much larger than the ids it is looked up with: the
        one-hot matmul over only the rows that occur (U of them), placed into zeros."""
        rows, where = np.unique(ids, return_inverse=True)        # (U,), (N,)
        onehot = np.zeros((rows.size, ids.size), dtype=dout.dtype)  # (U, N)
        onehot[where.reshape(-1), np.arange(ids.size)] = 1
        grad = np.zeros((vocab, dout.shape[1]), dtype=dout.dtype)
        grad[rows] = onehot @ dout                               # (U, C) into (V, C)
        return grad


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
