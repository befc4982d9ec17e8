"""The loss PNG: a valid file, the curve and held-out points drawn, same bytes each time."""
import struct
import zlib

import numpy as np
import pytest

from sparktrain.errors import SparkError
from sparktrain.eval.plot import BLUE, HEIGHT, RED, WIDTH, render, write_loss_png

CURVE = [{"outer": 0, "loss": 5.5, "phase": "start"},
         {"outer": 1, "loss": 4.0, "phase": "after_outer"},
         {"outer": 2, "loss": 3.1, "phase": "after_outer"},
         {"outer": 3, "loss": 2.7, "phase": "after_outer"}]


def decode_png(data: bytes) -> np.ndarray:
    """A minimal reader for the files we write (8-bit RGB, filter 0)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks.setdefault(kind, b"")
        chunks[kind] += body
        pos += 12 + n
    w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, color) == (8, 2) and b"IEND" in chunks
    raw = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(h, 1 + 3 * w)
    assert not raw[:, 0].any()
    return raw[:, 1:].reshape(h, w, 3)


def count(img, color):
    return int((img == np.array(color, np.uint8)).all(axis=-1).sum())


def test_png_is_valid_and_draws_curve_and_heldout(tmp_path):
    path = tmp_path / "sub" / "loss.png"
    data = write_loss_png(path, CURVE, heldout=[{"outer": 3, "loss": 3.4}])
    assert path.read_bytes() == data
    img = decode_png(data)
    assert img.shape == (HEIGHT, WIDTH, 3)
    assert count(img, BLUE) > 300 and count(img, RED) > 20
    assert np.array_equal(img, render(CURVE, [(3, 3.4)]))
    plain = decode_png(write_loss_png(tmp_path / "b.png", CURVE))
    assert count(plain, RED) == 0
    assert [p.name for p in path.parent.iterdir()] == ["loss.png"]  # no temp file left


def test_curve_goes_down_on_the_image():
    img = render(CURVE)
    blue = (img == np.array(BLUE, np.uint8)).all(axis=-1)        # (H, W)
    cols = np.flatnonzero(blue.any(axis=0))
    first_rows = np.flatnonzero(blue[:, cols[0]])
    last_rows = np.flatnonzero(blue[:, cols[-1]])
    assert first_rows.mean() < last_rows.mean()  # high loss near the top on the left


def test_same_curve_same_bytes_and_single_point(tmp_path):
    assert write_loss_png(tmp_path / "a.png", CURVE) == write_loss_png(tmp_path / "b.png", CURVE)
    decode_png(write_loss_png(tmp_path / "c.png", CURVE[:1]))


@pytest.mark.parametrize("curve, needle", [
    ([], "empty"),
    ([{"outer": 0, "loss": float("nan")}], "finite"),
    ([{"outer": 0}], "finite"),
    (["x"], "neither"),
])
def test_bad_curves(tmp_path, curve, needle):
    with pytest.raises(SparkError, match=needle):
        write_loss_png(tmp_path / "x.png", curve)
    assert not (tmp_path / "x.png").exists()
