"""model/backend.py and model/arrayapi.py: every operation has a numpy and a generic twin,
and they agree.

The generic twin runs on array-api-strict here (and on PyTorch under
`make test-gpu`); float64 inputs, so agreement is to rounding."""
import inspect

import numpy as np
import pytest

from sparktrain.model import backend
from sparktrain.model.arrayapi import ArrayApiOps
from sparktrain.model.backend import NumpyOps

from .xpkit import TARGETS, host, target_device

RNG = np.random.default_rng(7)
A3 = RNG.standard_normal((2, 3, 5))
B3 = RNG.standard_normal((2, 3, 5))
M2 = RNG.standard_normal((6, 5))
N2 = RNG.standard_normal((6, 5))
U = RNG.standard_normal((2, 3, 4, 6))        # (2, B, T, X) rope planes
COS, SIN = RNG.standard_normal((4, 6)), RNG.standard_normal((4, 6))
Y4 = RNG.standard_normal((2, 2, 6, 3))       # (B, KV, G*T, hd), G = 2, T = 3
R4 = RNG.random((2, 2, 6, 1))                # (B, KV, G*T, 1)
DY = RNG.standard_normal((2, 3, 4, 3)).transpose(0, 2, 1, 3)  # (B, H, T, hd) a strided view
IDS = np.array([[3, 0, 3], [1, 3, 2]])       # repeated ids: the gradient must add them
TARGETS_V = np.array([2, 0, 4, 4, 1, 3])

# name -> (arguments as host arrays; which of them are host-side indices, kept on the host)
CASES = {
    "rowdot": ((A3, B3), ()),
    "coldot": ((M2, N2), ()),
    "pool": ((RNG.random((2, 3)), A3), ()),
    "at_least": ((np.array([[0.0], [2.5], [0.5]]), 1), (1,)),
    "exp_": ((A3.copy(),), ()),
    "scaled": ((A3, 0.25), (1,)),
    "add_as": ((RNG.standard_normal((2, 6, 4)), (2, 3, 2, 4), np.triu(np.full((2, 4), -1.5))),
               (1,)),
    "sigmoid": ((M2,), ()),
    "rotate_pairs": ((U, COS, SIN), ()),
    "rotate_pairs_inverse": ((U, COS, SIN, True), (3,)),
    "rows_to_heads": ((Y4, R4, 4), (2,)),
    "heads_to_rows": ((DY, RNG.random((2, 2, 6, 1)), 2), (2,)),
    "matmul": ((A3, B3.swapaxes(-1, -2)), ()),
    "append_column": ((A3, RNG.standard_normal((2, 3))), ()),
    "append_column_scalar": ((A3, 1), (1,)),
    "swiglu_gate_grads": ((M2, N2, RNG.random((6, 5)), A3.reshape(6, 5)), ()),
    "gather_rows": ((M2, IDS), ()),
    "take_rows": ((M2, np.array([4, 0, 5])), (1,)),
    "scatter_rows": ((RNG.standard_normal((3, 5)), np.array([4, 0, 5]), 7), (1, 2)),
    "pick": ((M2, TARGETS_V), ()),
    "sub_onehot_": ((M2.copy(), TARGETS_V), ()),
    "embedding_grad": ((IDS.reshape(-1), RNG.standard_normal((6, 5)), 5), (2,)),
    "embedding_grad_rows": ((IDS.reshape(-1), RNG.standard_normal((6, 5)), 9), (2,)),
    "weighted_sum": ((M2[:, 0], N2[:, 0]), ()),
    "global_norm": (([M2, A3],), ()),
    "last_rows": ((A3, np.array([3, 1])), (1,)),
}


def test_the_two_backends_offer_the_same_operations():
    ops = {n for n, _ in inspect.getmembers(NumpyOps, inspect.isfunction) if not n.startswith("_")}
    generic = {n for n, _ in inspect.getmembers(ArrayApiOps, inspect.isfunction)
               if not n.startswith("_")}
    assert ops == generic
    tested = {name.replace("_inverse", "").replace("_scalar", "") for name in CASES}
    plumbing = {"asarray", "constant", "to_host", "host_dtype", "zeros", "ones", "copy", "load",
                "astype", "permute", "contiguous", "mT", "concat", "empty",
                "f32", "max_rowdots"}   # scalars and a host-only bound: tested below
    assert ops - plumbing == tested, "every fast-path operation has an agreement case"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_numpy_and_generic_agree(case, target):
    dev = target_device(target)
    be = dev.ops
    args, on_host = CASES[case]
    method = case.replace("_inverse", "").replace("_scalar", "")
    want = getattr(backend.NUMPY, method)(*[a.copy() if isinstance(a, np.ndarray) else a
                                            for a in args])
    moved = []
    for i, a in enumerate(args):
        if isinstance(a, list):
            moved.append([dev.to_device({"x": x})["x"] for x in a])
        elif isinstance(a, np.ndarray) and i not in on_host:
            moved.append(dev.to_device({"x": a.copy()})["x"])
        else:
            moved.append(a)
    got = getattr(be, method)(*moved)
    if isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-12)
    else:
        got = host(dev, got)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_numpy_layouts_and_out_buffers_change_no_bit():
    """The numpy path's strided views, laid-out results and `out` buffers (attention's
    heads regrouped without copies) give exactly the bytes of C-ordered copies."""
    be = backend.NUMPY
    y, r = Y4.astype(np.float32), R4.astype(np.float32)
    heads = be.rows_to_heads(y, r, 4)                                   # (B, H, T, hd)
    np.testing.assert_array_equal(heads, (y * r).reshape(2, 4, 3, 3))
    assert heads.transpose(0, 2, 1, 3).flags.c_contiguous
    rows = be.heads_to_rows(heads, r, 2)
    np.testing.assert_array_equal(rows, np.ascontiguousarray(heads).reshape(2, 2, 6, 3) * r)
    a, b = (RNG.standard_normal((2, 6, 7)).astype(np.float32) for _ in range(2))
    buf = np.zeros((2, 3, 6, 6), np.float32)
    got = be.matmul(a, b.swapaxes(-1, -2), out=buf[:, 1])
    np.testing.assert_array_equal(buf[:, 1], a @ b.swapaxes(-1, -2))
    assert got.base is not None and not buf[:, 0].any()


def test_a_float32_scalar_multiplies_the_same_on_both_backends():
    import array_api_strict as xp

    generic = ArrayApiOps(xp)
    x = np.float32(RNG.standard_normal(5))
    for value in (0.1, 1e-3, 3.0000001):
        assert float(backend.NUMPY.f32(value)) == generic.f32(value)
        want = backend.NUMPY.f32(value) * x
        got = np.asarray(generic.to_host(generic.f32(value) * xp.asarray(x)))
        np.testing.assert_array_equal(got, want)


def test_the_score_bound_is_read_back_on_the_host_only():
    import array_api_strict as xp

    q2, k2 = backend.NUMPY.max_rowdots(M2, N2)
    assert (q2, k2) == (float(np.max(np.sum(M2 * M2, -1))), float(np.max(np.sum(N2 * N2, -1))))
    assert ArrayApiOps(xp).max_rowdots(xp.asarray(M2), xp.asarray(N2)) is None


def test_embedding_grad_adds_repeated_ids():
    ids, dout = np.array([1, 1, 0]), np.array([[1.0, 2.0], [10.0, 20.0], [5.0, 5.0]])
    np.testing.assert_array_equal(backend.NUMPY.embedding_grad(ids, dout, 3),
                                  [[5, 5], [11, 22], [0, 0]])


def test_numpy_arrays_take_the_numpy_path():
    assert backend.of(np.zeros(2)) is backend.NUMPY
    assert backend.of(np.float32(1)) is backend.NUMPY
    import array_api_strict
    assert isinstance(backend.of(array_api_strict.zeros(2)), ArrayApiOps)
    assert backend.of(array_api_strict.zeros(2)) is backend.of(array_api_strict.ones(3))


def test_a_foreign_array_without_the_extra_names_the_extra(monkeypatch):
    monkeypatch.setattr(backend, "array_api_compat", None)
    with pytest.raises(TypeError, match=r"pip install -e '\.\[gpu\]'"):
        backend.of([1, 2])
