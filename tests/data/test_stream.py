"""Token streams on disk, seeded windows, every target counted once, bits per byte."""
import lzma
import math
import zlib

import numpy as np
import pytest

from sparktrain.data.base import bits_per_byte
from sparktrain.data.baselines import compressor_bpb
from sparktrain.data.corpus import (WindowSampler, read_stream, sliding_batches, stream_batches,
                                    stream_of,
                                    write_stream)
from sparktrain.data.tokenizer import ByteTokenizer
from sparktrain.core.errors import SparkError


def test_stream_frames_each_text_and_round_trips_uint8_and_uint16(tmp_path):
    t = ByteTokenizer()
    s = stream_of(t, ["ab", "c"])
    assert s.tolist() == [t.bos, 97, 98, t.eos, t.bos, 99, t.eos]
    write_stream(tmp_path / "a.bin", s, 256)
    assert (tmp_path / "a.bin").stat().st_size == 7
    back = read_stream(tmp_path / "a.bin", 256)
    assert isinstance(back, np.memmap) and back.tolist() == s.tolist()
    big = np.array([0, 1000, 65534], dtype=np.int64)
    write_stream(tmp_path / "b.bin", big, 65535)
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x00\xe8\x03\xfe\xff"  # little-endian
    assert read_stream(tmp_path / "b.bin", 65535).tolist() == big.tolist()


def test_a_torn_stream_is_one_line(tmp_path):
    (tmp_path / "t.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(SparkError, match="not a whole number of uint16"):
        read_stream(tmp_path / "t.bin", 1024)


def test_windows_are_seeded_slices_with_every_target_counted():
    stream = np.arange(1000, dtype=np.int64)
    a, b = WindowSampler(stream, 16, 4, seed=3), WindowSampler(stream, 16, 4, seed=3)
    for _ in range(3):
        x, y = a.next(), b.next()
        assert np.array_equal(x.inputs, y.inputs)
    assert x.inputs.shape == (4, 16) and x.mask.sum() == 64
    assert np.array_equal(x.targets, x.inputs + 1)  # targets are the next token
    other = WindowSampler(stream, 16, 4, seed=4).next()
    assert not np.array_equal(other.inputs, WindowSampler(stream, 16, 4, seed=3).next().inputs)


def test_sampler_state_resumes_the_same_windows():
    stream = np.arange(500, dtype=np.int64)
    a = WindowSampler(stream, 8, 2, seed=0)
    a.next()
    state = a.state()
    want = a.next().inputs
    b = WindowSampler(stream, 8, 2, seed=0)
    b.set_state(state)
    assert np.array_equal(b.next().inputs, want)


def test_short_stream_is_one_line():
    with pytest.raises(SparkError, match="fewer than seq_len"):
        WindowSampler(np.arange(5), 8, 2, seed=0)


@pytest.mark.parametrize("n", [2, 9, 10, 17, 33])
def test_whole_stream_batches_count_each_target_once(n):
    stream = np.arange(n, dtype=np.int64)
    seen = []
    for batch in stream_batches(stream, seq_len=8, batch_size=2, pad=0):
        assert np.array_equal(batch.targets[batch.mask > 0], batch.inputs[batch.mask > 0] + 1)
        seen += batch.targets[batch.mask > 0].tolist()
    assert seen == list(range(1, n))


def naive_windows(stream, starts, seq_len):
    """The reference: one slice per window."""
    return np.stack([np.asarray(stream[s:s + seq_len + 1], dtype=np.int64) for s in starts])


def naive_stream_batches(stream, seq_len, batch_size, pad):
    """The reference: one slice per window, padded by hand."""
    starts = list(range(0, max(len(stream) - 1, 0), seq_len))
    for b0 in range(0, len(starts), batch_size):
        chunk = starts[b0:b0 + batch_size]
        inputs = np.full((len(chunk), seq_len), pad, dtype=np.int64)
        targets = np.full((len(chunk), seq_len), pad, dtype=np.int64)
        mask = np.zeros((len(chunk), seq_len), dtype=np.float32)
        for r, s in enumerate(chunk):
            window = np.asarray(stream[s:s + seq_len + 1], dtype=np.int64)
            m = len(window) - 1
            inputs[r, :m], targets[r, :m], mask[r, :m] = window[:-1], window[1:], 1.0
        yield inputs, targets, mask


@pytest.mark.parametrize("n", [2, 9, 10, 17, 33, 300])
def test_gathered_windows_equal_the_sliced_reference(tmp_path, n):
    tokens = np.random.default_rng(n).integers(0, 1024, n)
    write_stream(tmp_path / "s.bin", tokens, 1024)
    stream = read_stream(tmp_path / "s.bin", 1024)  # uint16, memory-mapped, as training reads it
    got = list(stream_batches(stream, 8, 3, pad=1023))
    want = list(naive_stream_batches(stream, 8, 3, pad=1023))
    assert len(got) == len(want)
    for batch, (inputs, targets, mask) in zip(got, want):
        for a, b in ((batch.inputs, inputs), (batch.targets, targets), (batch.mask, mask)):
            assert a.dtype == b.dtype and type(a) is np.ndarray
            np.testing.assert_array_equal(a, b)
    if n > 9:
        sampler = WindowSampler(stream, 8, 4, seed=0)
        starts = np.random.default_rng([0, 0x57E4]).integers(0, n - 8, size=4)
        batch = sampler.next()
        rows = naive_windows(stream, starts, 8)
        assert batch.inputs.dtype == np.int64 and type(batch.inputs) is np.ndarray
        np.testing.assert_array_equal(batch.inputs, rows[:, :-1])
        np.testing.assert_array_equal(batch.targets, rows[:, 1:])


def test_bits_per_byte_and_compressors():
    assert bits_per_byte(math.log(2) * 80, 10) == pytest.approx(8.0)
    data = b"def f(x):\n    return x * 2\n" * 200
    got = compressor_bpb(data)
    assert got["zlib9_bpb"] == 8 * len(zlib.compress(data, 9)) / len(data)
    assert got["lzma9e_bpb"] == 8 * len(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)) / len(data)
    assert got["zlib9_bpb"] < 1.0  # repetitive text compresses


@pytest.mark.parametrize("n", [2, 9, 17, 40, 41, 64])
def test_sliding_windows_with_stride_seq_len_are_the_non_overlapping_ones(n):
    stream = np.arange(n) % 7 + 3
    old = list(stream_batches(stream, 8, 3, pad=0))
    new = list(sliding_batches(stream, 8, 8, 3, pad=0))
    assert len(old) == len(new)
    for a, b in zip(old, new):
        for field in ("inputs", "targets", "mask"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


@pytest.mark.parametrize("n, stride", [(2, 2), (9, 3), (40, 1), (41, 3), (100, 5), (57, 8)])
def test_a_small_stride_counts_every_target_once_with_long_context(n, stride):
    T = 8
    stream = np.arange(n)  # the token is its own position
    seen = []
    for b in sliding_batches(stream, T, stride, 4, pad=0):
        for row in range(len(b.mask)):
            for t in np.flatnonzero(b.mask[row]):
                target = int(b.targets[row, t])
                first = int(b.inputs[row, 0])
                seen.append(target)
                if first > 0:  # every window but the first: most of a window behind it
                    assert t >= T - stride
                assert int(b.inputs[row, t]) == target - 1
            real = int(b.mask[row].nonzero()[0].max()) + 1  # context kept, not padded
            assert b.inputs[row, :real].tolist() == list(range(first, first + real))
    assert sorted(seen) == list(range(1, n))
