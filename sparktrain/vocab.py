"""Vocab facts shared by the params check and the tokenizers, without importing
the tokenizers library (params are checked before anything heavy loads)."""
from __future__ import annotations

import numpy as np

from sparktrain.errors import SparkError

TOKENIZERS = ("byte", "bpe")
SPECIALS = ("<|bos|>", "<|sep|>", "<|eos|>")  # ids 0, 1, 2 of a BPE vocab
MIN_BPE_VOCAB = 256 + len(SPECIALS)           # the byte alphabet and the specials
MAX_VOCAB = 65535                             # ids must fit uint16 token files


def token_dtype(vocab: int) -> np.dtype:
    """The narrowest unsigned type for a vocab's ids: uint8 for bytes, else uint16."""
    if vocab <= 256:
        return np.dtype(np.uint8)
    if vocab <= MAX_VOCAB + 1:
        return np.dtype(np.uint16)
    raise SparkError(f"vocab {vocab} does not fit uint16 token files (max {MAX_VOCAB})")
