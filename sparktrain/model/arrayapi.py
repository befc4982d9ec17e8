"""The array backend's generic twin (docs/gpu.md): the operations NumpyOps
(model/backend.py) writes with einsum, `out=` buffers and fancy-index scatters, in
standard array-API calls only, with no scatter, so a run on a GPU is deterministic. Each
method keeps its numpy twin's name and meaning (the twin's docstring says it);
tests/model/test_model_backend.py checks every pair agrees."""
from __future__ import annotations

import numpy as np


class ArrayApiOps:
    """Any array-API namespace: standard calls only (array-api-strict runs this path in CI)."""
    writes_out = False  # `out` buffers are left alone: every result is a fresh array

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

    def empty(self, shape, like):
        return self.xp.empty(shape, dtype=like.dtype, device=like.device)

    def copy(self, x):
        return self.xp.asarray(x, copy=True)

    def matmul(self, a, b, out=None):
        return a @ b

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

    def rows_to_heads(self, y, r, heads):
        B, KV, GT, hd = y.shape
        return self.xp.reshape(y * r, (B, heads, GT * KV // heads, hd))

    def heads_to_rows(self, dy, r, kv):
        B, H, T, hd = dy.shape
        return self.xp.reshape(dy, (B, kv, H // kv * T, hd)) * r

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

    embedding_grad_rows = embedding_grad  # on a device the whole table's one-hot matmul
