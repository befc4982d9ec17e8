"""The bigram table's gradient over only the rows a batch uses (NumpyOps.embedding_grad_rows)
is the whole table's one-hot matmul up to float32 rounding (the kernel may block a shorter
product otherwise), the same bytes on every call, and zero on the rows no id used."""
from __future__ import annotations

import numpy as np
import pytest

from sparktrain.model.backend import NUMPY


@pytest.mark.parametrize("vocab, n, width", [(8192, 1024, 128), (300, 64, 16), (50, 700, 32),
                                             (65536, 2048, 64)])
def test_embedding_grad_rows_is_the_one_hot_matmul(vocab, n, width):
    rng = np.random.default_rng(vocab)
    ids = rng.integers(0, min(vocab, 97), n)  # repeats: rows summed from many positions
    dout = rng.standard_normal((n, width)).astype(np.float32)
    want = NUMPY.embedding_grad(ids, dout, vocab)
    got = NUMPY.embedding_grad_rows(ids, dout, vocab)
    assert got.dtype == want.dtype and got.shape == (vocab, width)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.tobytes() == NUMPY.embedding_grad_rows(ids, dout, vocab).tobytes()
    used = np.zeros(vocab, dtype=bool)
    used[ids] = True
    assert not got[~used].any() and got[used].any(axis=1).all()
