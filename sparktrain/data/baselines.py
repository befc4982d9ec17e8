"""The compressor baselines of a held-out text (docs/training.md "The compressor baselines"):
zlib-9, lzma-9e and PPMd at its best order, each cold and (lzma, PPMd) primed with the train
split; computed once per corpus and kept under out/cache/baselines/ by the corpus's sha256."""
from __future__ import annotations

import hashlib
import lzma
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyppmd

from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import write_json
from sparktrain.core.jobfiles import BASELINE_CACHE, root_of
from sparktrain.core.safeload import load_json_file

# What a report carries of the baselines: each coder's bits per held-out byte, cold and
# primed (its keys end in BPB_SUFFIX; core/metric_keys.py BASELINE_BPB names them), and the
# PPMd orders that gave them.
BPB_SUFFIX = "_bpb"
BASELINE_ORDERS = ("ppmd_order", "ppmd_primed_order")
# PPMd (variant I, as 7-Zip's .7z PPMd): the orders tried on each text, the fewest bytes named.
# Above 16 pyppmd codes this corpus's held-out bytes to the same size as at 16.
PPMD_ORDERS = (4, 8, 12, 16)
PPMD_MEMORY = 256 << 20  # its model's memory: 1 GiB codes the coder proof's split the same


def compressor_bpb(data: bytes, primer: bytes = b"") -> dict:
    """Compressed bits per byte of `data`: zlib level 9, lzma preset 9-extreme and PPMd at
    its best order, cold; lzma and PPMd also primed with `primer` (the train split), the
    extra bytes C(primer + data) - C(primer) (docs/training.md "The compressor baselines")."""
    if not data:
        raise ValueError("compressors need at least one byte")
    n = len(data)
    # lzma lets go of the GIL, PPMd does not: lzma's three sizes in a thread beside PPMd's
    # (half the wall time of the two one after the other on the proof's 7.9 MB)
    with ThreadPoolExecutor(1) as pool:
        lzmas = pool.map(lzma_size, [data] + ([primer + data, primer] if primer else []))
        z = len(zlib.compress(data, 9))
        cold = best_ppmd(data)
        primed = best_ppmd(data, primer) if primer else None
        x, *pair = list(lzmas)
    report = {"bytes": n, "zlib9_bytes": z, "lzma9e_bytes": x,
              "zlib9_bpb": 8 * z / n, "lzma9e_bpb": 8 * x / n}
    order, size = cold
    report.update(ppmd_bytes=size, ppmd_bpb=8 * size / n, ppmd_order=order,
                  ppmd_orders=list(PPMD_ORDERS))
    if primer:
        x = pair[0] - pair[1]
        order, size = primed
        report.update(primer_bytes=len(primer), lzma9e_primed_bytes=x,
                      lzma9e_primed_bpb=8 * x / n, ppmd_primed_bytes=size,
                      ppmd_primed_bpb=8 * size / n, ppmd_primed_order=order)
    return report


def lzma_size(data: bytes) -> int:
    return len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))


def ppmd_size(data: bytes, order: int) -> int:
    return len(pyppmd.compress(data, max_order=order, mem_size=PPMD_MEMORY, variant="I"))


def best_ppmd(data: bytes, primer: bytes = b"") -> tuple[int, int]:
    """(order, bytes) of the order in PPMD_ORDERS that codes `data` (after `primer`) smallest."""
    sizes = [(ppmd_size(primer + data, order) - (ppmd_size(primer, order) if primer else 0),
              order) for order in PPMD_ORDERS]
    size, order = min(sizes)
    return order, size


def cache_key(corpus_sha256: str) -> str:
    """The corpus's sha256 and every setting that changes a figure."""
    what = f"{corpus_sha256}|zlib9|lzma9e|ppmd-I|{PPMD_ORDERS}|{PPMD_MEMORY}"
    return hashlib.sha256(what.encode("utf-8")).hexdigest()


def cached_baselines(data: bytes, primer: bytes, corpus_sha256: str, near: Path) -> dict:
    """compressor_bpb(data, primer), read from the project's cache when this corpus was
    measured before (a prepare that only changed the tokenizer costs no compression)."""
    root = root_of(near)
    path = None if root is None else root / BASELINE_CACHE / f"{cache_key(corpus_sha256)}.json"
    if path is not None and path.is_file():
        try:
            found = load_json_file(path, "job file")
        except SparkError:  # a torn or foreign file: measured again below
            found = None
        if isinstance(found, dict) and found.get("bytes") == len(data) \
                and found.get("primer_bytes", 0) == len(primer):
            return found
    report = compressor_bpb(data, primer)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, report)
    return report
