"""Bits per byte, one scale for byte and BPE models and compressors: nats over the text's bytes."""
from __future__ import annotations

import lzma
import math
import zlib


def bits_per_byte(total_nats: float, n_bytes: int) -> float:
    if n_bytes <= 0:
        raise ValueError("bits per byte needs at least one byte")
    return total_nats / math.log(2) / n_bytes


def compressor_bpb(data: bytes) -> dict:
    """zlib level 9 and lzma preset 9-extreme on `data`: compressed bits per input byte."""
    if not data:
        raise ValueError("compressors need at least one byte")
    z = len(zlib.compress(data, 9))
    x = len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    n = len(data)
    return {"bytes": n, "zlib9_bytes": z, "lzma9e_bytes": x,
            "zlib9_bpb": 8 * z / n, "lzma9e_bpb": 8 * x / n}
