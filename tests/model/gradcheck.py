"""Central finite differences in float64 and a sound per-tensor relative error."""
from __future__ import annotations

import numpy as np

EPS = 1e-5
TOL = 1e-6


def numeric_grad(f, arr, index_list, eps=EPS):
    """d f / d arr[i] for each flat index i, by central differences (arr is restored)."""
    flat = arr.reshape(-1)
    out = np.zeros(len(index_list))
    for n, i in enumerate(index_list):
        old = flat[i]
        flat[i] = old + eps
        fp = f()
        flat[i] = old - eps
        fm = f()
        flat[i] = old
        out[n] = (fp - fm) / (2 * eps)
    return out


def rel_error(analytic, numeric) -> float:
    """max |a - n| over max(max |n|, tiny): scale-free, and safe when a tensor's
    gradient is (almost) zero."""
    a = np.asarray(analytic, dtype=np.float64).reshape(-1)
    n = np.asarray(numeric, dtype=np.float64).reshape(-1)
    return float(np.max(np.abs(a - n)) / max(np.max(np.abs(n)), 1e-12))


def check_tensors(f, tensors: dict, grads: dict, max_entries=None, rng=None,
                  must_check=None) -> dict[str, float]:
    """Compare grads[name] with finite differences of f() w.r.t. tensors[name].

    max_entries caps how many entries of a big tensor are probed (a random
    sample, its 8 largest analytic entries, and must_check[name] flat indices). Returns the worst relative
    error per tensor and prints them (pytest -s shows the table)."""
    rng = rng or np.random.default_rng(0)
    worst = {}
    for name, arr in tensors.items():
        size = arr.size
        if max_entries is None or size <= max_entries:
            idx = np.arange(size)
        else:
            idx = rng.choice(size, max_entries, replace=False)
            # the largest analytic entries too, so max|n| is the tensor's real scale
            idx = np.union1d(idx, np.argsort(-np.abs(grads[name].reshape(-1)))[:8])
            if must_check and name in must_check:
                idx = np.union1d(idx, must_check[name])
        num = numeric_grad(f, arr, list(idx))
        worst[name] = rel_error(grads[name].reshape(-1)[idx], num)
    width = max(len(n) for n in worst)
    for name, err in worst.items():
        print(f"  {name:<{width}}  max rel err {err:.2e}")
    return worst
