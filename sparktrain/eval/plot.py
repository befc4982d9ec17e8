"""The loss curve as a small PNG, drawn with numpy and encoded with zlib + struct.

No plotting library: a canvas is an (H, W, 3) uint8 array, lines are dense
point samples, tick labels use a 3x5 bitmap font. The PNG holds one IDAT chunk
of unfiltered RGB rows, so the same curve always gives the same bytes.
"""
from __future__ import annotations

import math
import os
import struct
import zlib
from typing import Sequence

import numpy as np

from sparktrain.errors import SparkError
from sparktrain.fsutil import atomic_write_bytes

WIDTH, HEIGHT = 480, 320
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 36   # plot margins in pixels
WHITE, BLACK, GREY = (255, 255, 255), (0, 0, 0), (225, 225, 225)
BLUE, RED = (31, 119, 180), (214, 39, 40)
FONT_SCALE = 2

# 3x5 glyphs, rows top to bottom, 3 bits each (4 = left column).
_GLYPHS = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 7, 1, 7),
    "4": (5, 5, 7, 1, 1), "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 1, 1, 1),
    "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7), ".": (0, 0, 0, 0, 2), "-": (0, 0, 7, 0, 0),
    "e": (0, 7, 7, 4, 7), "+": (0, 2, 7, 2, 0),
}


def png_bytes(canvas: np.ndarray) -> bytes:
    """(H, W, 3) uint8 -> PNG file bytes (8-bit RGB, filter 0 on every row)."""
    h, w, _ = canvas.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), canvas.reshape(h, w * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9)) + chunk(b"IEND", b""))


def _points(curve, what: str) -> list[tuple[float, float]]:
    pts = []
    for i, item in enumerate(curve):
        if isinstance(item, dict):
            x, y = item.get("outer", i), item.get("loss")
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            x, y = item
        else:
            raise SparkError(f"{what}[{i}] is neither {{'outer', 'loss'}} nor an (x, y) pair")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                   for v in (x, y)):
            raise SparkError(f"{what}[{i}] needs finite numbers, got outer={x!r} loss={y!r}")
        pts.append((float(x), float(y)))
    return pts


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values inside [lo, hi] (1, 2, 5 x 10^k spacing)."""
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


class _Canvas:
    def __init__(self, xlo, xhi, ylo, yhi):
        self.img = np.full((HEIGHT, WIDTH, 3), WHITE, dtype=np.uint8)  # (H, W, 3)
        self.xlo, self.xhi, self.ylo, self.yhi = xlo, xhi, ylo, yhi

    def px(self, x: float, y: float) -> tuple[float, float]:
        """Data coordinates -> pixel (column, row); y grows upward."""
        c = LEFT + (x - self.xlo) / (self.xhi - self.xlo) * (WIDTH - LEFT - RIGHT - 1)
        r = HEIGHT - BOTTOM - 1 - (y - self.ylo) / (self.yhi - self.ylo) * (HEIGHT - TOP - BOTTOM - 1)
        return c, r

    def rect(self, c0, r0, c1, r1, color):
        c0, c1 = sorted((int(round(c0)), int(round(c1))))
        r0, r1 = sorted((int(round(r0)), int(round(r1))))
        self.img[max(r0, 0):max(r1 + 1, 0), max(c0, 0):max(c1 + 1, 0)] = color

    def line(self, p0, p1, color, width=2):
        (c0, r0), (c1, r1) = p0, p1
        n = int(max(abs(c1 - c0), abs(r1 - r0)) * 2) + 1
        for t in np.linspace(0.0, 1.0, n + 1):
            c, r = c0 + (c1 - c0) * t, r0 + (r1 - r0) * t
            self.rect(c - width / 2, r - width / 2, c + width / 2 - 1, r + width / 2 - 1, color)

    def text(self, s: str, c: int, r: int, color=BLACK):
        """Top-left at (c, r); unknown characters are skipped."""
        for ch in s:
            for dy, bits in enumerate(_GLYPHS.get(ch, ())):
                for dx in range(3):
                    if bits & (4 >> dx):
                        self.rect(c + dx * FONT_SCALE, r + dy * FONT_SCALE,
                                  c + (dx + 1) * FONT_SCALE - 1, r + (dy + 1) * FONT_SCALE - 1,
                                  color)
            c += 4 * FONT_SCALE


def _label(v: float) -> str:
    return f"{v:.4g}"


def render(loss_curve: Sequence, heldout: Sequence | None = None) -> np.ndarray:
    train = _points(loss_curve, "loss_curve")
    if not train:
        raise SparkError("loss_curve is empty; nothing to plot")
    held = _points(heldout or [], "heldout")
    xs = [p[0] for p in train + held]
    ys = [p[1] for p in train + held]
    xlo, xhi = min(xs), max(xs)
    if xhi == xlo:
        xlo, xhi = xlo - 0.5, xhi + 0.5
    ylo, yhi = min(ys), max(ys)
    pad = (yhi - ylo) * 0.05 or 0.5
    cv = _Canvas(xlo, xhi, ylo - pad, yhi + pad)
    x0, y0 = cv.px(xlo, cv.ylo)
    x1, y1 = cv.px(xhi, cv.yhi)
    for t in _ticks(cv.ylo, cv.yhi):                        # y grid, ticks, labels
        _, r = cv.px(xlo, t)
        cv.rect(x0 + 1, r, x1, r, GREY)
        cv.rect(x0 - 5, r, x0 - 1, r, BLACK)
        s = _label(t)
        cv.text(s, int(x0 - 8 - len(s) * 4 * FONT_SCALE), int(r) - 5)
    for t in _ticks(xlo, xhi, min(6, int(xhi - xlo) + 1) if xhi - xlo >= 1 else 3):  # x ticks
        c, _ = cv.px(t, cv.ylo)
        cv.rect(c, y0 + 1, c, y0 + 5, BLACK)
        s = _label(t)
        cv.text(s, int(c - len(s) * 2 * FONT_SCALE), int(y0) + 9)
    cv.rect(x0, y1, x0, y0, BLACK)                          # axes
    cv.rect(x0, y0, x1, y0, BLACK)
    pix = [cv.px(x, y) for x, y in train]
    for a, b in zip(pix, pix[1:]):
        cv.line(a, b, BLUE)
    for c, r in pix:
        cv.rect(c - 2, r - 2, c + 2, r + 2, BLUE)
    for x, y in held:                                       # held-out: red squares
        c, r = cv.px(x, y)
        cv.rect(c - 4, r - 4, c + 4, r + 4, RED)
        cv.rect(c - 2, r - 2, c + 2, r + 2, WHITE)
    return cv.img


def write_loss_png(path: str | os.PathLike, loss_curve: Sequence,
                   heldout: Sequence | None = None) -> bytes:
    """Draw the training curve (blue) and optional held-out points (red) to a PNG.

    loss_curve / heldout: [{"outer": k, "loss": x}, ...] or [(k, x), ...].
    Written atomically; returns the bytes.
    """
    data = png_bytes(render(loss_curve, heldout))
    atomic_write_bytes(path, data)
    return data


def heldout_points(ev, curve: Sequence, path) -> list:
    """Held-out losses from an eval JSON, placed at the last outer pass.

    Accepts `spark eval --json` output (a top-level "loss"), an object of such
    results (one point each), or an explicit "heldout" list of {outer, loss}.
    """
    last = max((c.get("outer", i) for i, c in enumerate(curve) if isinstance(c, dict)),
               default=len(curve) - 1)
    if isinstance(ev, dict):
        if isinstance(ev.get("heldout"), list):
            return ev["heldout"]
        if _is_number(ev.get("loss")):
            return [{"outer": last, "loss": ev["loss"]}]
        nested = [v["loss"] for _, v in sorted(ev.items())
                  if isinstance(v, dict) and _is_number(v.get("loss"))]
        if nested:
            return [{"outer": last, "loss": x} for x in nested]
    raise SparkError(f"eval file {path} has no held-out 'loss' to plot")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
