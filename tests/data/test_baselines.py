"""The compressor baselines: cold and primed figures are what the coders give, the best PPMd
order is named, and a corpus is measured once (the cache by its sha256)."""
import lzma
import zlib

import pyppmd
import pytest

from sparktrain.data import baselines
from sparktrain.data.baselines import (PPMD_MEMORY, PPMD_ORDERS, cache_key, cached_baselines,
                                       compressor_bpb)
from sparktrain.core.jobfiles import BASELINE_CACHE

TRAIN = b"".join(b"def f%d(x):\n    return x * %d + len(x)\n\n" % (i, i % 7) for i in range(300))
HELD = b"".join(b"def g%d(x):\n    return x * %d + len(x)\n\n" % (i, i % 5) for i in range(60))


def ppmd(data, order):
    return len(pyppmd.compress(data, max_order=order, mem_size=PPMD_MEMORY, variant="I"))


def test_cold_and_primed_figures_are_the_coders_own():
    got = compressor_bpb(HELD, TRAIN)
    n = len(HELD)
    assert got["zlib9_bpb"] == 8 * len(zlib.compress(HELD, 9)) / n
    xz = lambda d: len(lzma.compress(d, preset=9 | lzma.PRESET_EXTREME))  # noqa: E731
    assert got["lzma9e_primed_bpb"] == 8 * (xz(TRAIN + HELD) - xz(TRAIN)) / n
    cold = {order: ppmd(HELD, order) for order in PPMD_ORDERS}
    primed = {order: ppmd(TRAIN + HELD, order) - ppmd(TRAIN, order) for order in PPMD_ORDERS}
    assert got["ppmd_bpb"] == 8 * min(cold.values()) / n
    assert cold[got["ppmd_order"]] == min(cold.values())
    assert got["ppmd_primed_bpb"] == 8 * min(primed.values()) / n
    assert primed[got["ppmd_primed_order"]] == min(primed.values())
    # text like the train split codes cheaper after it: the point of priming
    assert got["ppmd_primed_bpb"] < got["ppmd_bpb"] and got["lzma9e_primed_bpb"] < got["lzma9e_bpb"]
    assert got["primer_bytes"] == len(TRAIN) and got["bytes"] == n


def test_the_figures_a_report_carries_are_the_headline_tables():
    """An eval record takes every `_bpb` figure of the report: exactly BASELINE_BPB."""
    from sparktrain.core.metric_keys import BASELINE_BPB

    got = compressor_bpb(HELD, TRAIN)
    assert sorted(k for k in got if k.endswith(baselines.BPB_SUFFIX)) == sorted(BASELINE_BPB)


def test_no_primer_no_primed_figures():
    got = compressor_bpb(HELD)
    assert "ppmd_primed_bpb" not in got and got["ppmd_bpb"] > 0
    with pytest.raises(ValueError):
        compressor_bpb(b"", TRAIN)


def test_a_corpus_is_measured_once_by_its_sha256(tmp_path, monkeypatch):
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    job = tmp_path / "out/train/j/corpus"
    job.mkdir(parents=True)
    first = cached_baselines(HELD, TRAIN, "ab" * 32, job)
    cached = tmp_path / BASELINE_CACHE / f"{cache_key('ab' * 32)}.json"
    assert cached.is_file()
    calls = []
    monkeypatch.setattr(baselines, "compressor_bpb", lambda *a: calls.append(a) or {})
    assert cached_baselines(HELD, TRAIN, "ab" * 32, job) == first and not calls
    # another corpus, or a torn cache file, is measured again
    cached_baselines(HELD, TRAIN, "cd" * 32, job)
    cached.write_text("{not json")
    cached_baselines(HELD, TRAIN, "ab" * 32, job)
    assert len(calls) == 2
