"""Dropout on the residual branches while training (docs/training.md "Reading the data
more than once"): PyTorch's nn.Dropout(p) in training mode, inverted (a kept unit
scaled by 1 / (1 - p)), on each block's attention output after its o projection and its MLP output after its down
projection (nanoGPT's resid_dropout). The masks are drawn on the host by a counter-based
generator keyed by (seed, micro-step, the row's index in the whole micro-batch, layer,
site), so the bytes depend neither on the worker count nor on where a resumed run restarts;
a device takes the host masks."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sparktrain.model import backend

SITES = ("attn", "mlp")  # a block's residual branches, in the order they run
SALT = 0xD50 << 32  # in the counter's last word: dropout's streams apart from any other


class Dropout(NamedTuple):
    """The masks of one micro-step: p zeroes a unit, `row0` is this batch's first row in
    the whole micro-batch (a shard's offset)."""
    p: float
    seed: int
    step: int
    row0: int = 0

    def keep(self, layer: int, site: str, rows: int, shape: tuple) -> np.ndarray:
        """(rows, *shape) bool on the host, True where a unit is kept: a uniform 32-bit word
        at or above p * 2**32 (probability 1 - p to 2**-32). Each row's words are Philox's
        stream keyed by the seed, from the counter (0, step, row, site)."""
        out = np.empty((rows, *shape), dtype=bool)
        size = int(np.prod(shape))
        threshold = np.uint32(min(round(self.p * 2 ** 32), 2 ** 32 - 1))
        site_word = SALT | layer << 1 | SITES.index(site)
        for b in range(rows):
            bits = np.random.Philox(key=self.seed,
                                    counter=[0, self.step, self.row0 + b, site_word])
            words = bits.random_raw(-(-size // 2)).view(np.uint32)[:size]
            out[b] = (words >= threshold).reshape(shape)
        return out

    def mask(self, layer: int, site: str, like):
        """like's shape (B, ...) of 0 and 1 / (1 - p) (torch's scale, in like's precision),
        in like's namespace and dtype."""
        be = backend.of(like)
        dtype = be.host_dtype(like)
        host = self.keep(layer, site, like.shape[0], tuple(like.shape[1:])).astype(dtype)
        host *= dtype.type(1) / dtype.type(1.0 - self.p)
        return be.asarray(host, like)
