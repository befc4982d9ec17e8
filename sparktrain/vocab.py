"""Vocab facts shared by the params check and the tokenizers, without importing
the tokenizers library (params are checked before anything heavy loads)."""
from __future__ import annotations

import numpy as np

from sparktrain.core.errors import SparkError

TOKENIZERS = ("byte", "bpe")
BYTE_VOCAB = 256                              # byte tokens: the UTF-8 bytes
# Byte values that never occur in UTF-8, so they cannot collide with text: the
# BOS, SEP and EOS of byte tokens (EOS doubles as right padding: model/base.py PAD).
BYTE_SPECIALS = (0xFD, 0xFE, 0xFF)
SPECIALS = ("<|bos|>", "<|sep|>", "<|eos|>")  # ids 0, 1, 2 of a BPE vocab
MIN_BPE_VOCAB = 256 + len(SPECIALS)           # the byte alphabet and the specials
MAX_VOCAB = 65535                             # ids must fit uint16 token files


def token_dtype(vocab: int) -> np.dtype:
    """The narrowest unsigned type for a vocab's ids: uint8 for bytes, else uint16."""
    if vocab <= BYTE_VOCAB:
        return np.dtype(np.uint8)
    if vocab <= MAX_VOCAB + 1:
        return np.dtype(np.uint16)
    raise SparkError(f"vocab {vocab} does not fit uint16 token files (max {MAX_VOCAB})")
