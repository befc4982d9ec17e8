"""The loss picture (docs/outputs.md, loss.png) and the axes and PNG writer `spark compare`'s
shares; only eval's plots load matplotlib (slow to import)."""
from __future__ import annotations

import io
import os
from dataclasses import replace
from typing import Sequence

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import atomic_write_bytes
from sparktrain.eval.headline import is_finite, is_number
from sparktrain.model.config import SCALES, ModelConfig

SIZE_IN, DPI = (8.0, 5.0), 100   # 800 x 500 pixels
TRAIN_COLOR, HELDOUT_COLOR = "#1f77b4", "#d62728"
# Losses are float32 sums in the loop (max ~3.4e38); anything beyond that is a
# corrupt file, and values near the float64 limit overflow the axis arithmetic.
LIMIT = 1e38
LOG_Y_RATIO = 20.0               # log y-axis once max/min loss exceeds this


def _points(curve, what: str) -> list[tuple[float, float]]:
    pts = []
    for i, item in enumerate(curve):
        if isinstance(item, dict):
            x, y = item.get("outer", i), item.get("loss")
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            x, y = item
        else:
            raise SparkError(f"{what}[{i}] is neither {{'outer', 'loss'}} nor an (x, y) pair")
        if not all(is_finite(v) for v in (x, y)):
            raise SparkError(f"{what}[{i}] needs finite numbers, got outer={x!r} loss={y!r}")
        if max(abs(x), abs(y)) > LIMIT:
            raise SparkError(f"{what}[{i}] is out of the plottable range (|value| <= {LIMIT:g}), "
                             f"got outer={x!r} loss={y!r}")
        pts.append((float(x), float(y)))
    return pts


def scale_label(arch) -> str | None:
    """The scale-table name of a checkpoint's `arch`, else its size in words."""
    if not isinstance(arch, dict):
        return None
    try:
        cfg = ModelConfig.from_dict(arch)
    except (SparkError, TypeError):
        return None
    for name, known in SCALES.items():
        if replace(known, train_attn=cfg.train_attn) == cfg:
            return name
    return f"dim {cfg.dim}, {cfg.n_layer} layers, seq {cfg.seq_len}"


def style_axes(ax, title: str, ylabel: str, ys: Sequence[float], sizes: tuple) -> None:
    """Title, labelled axes (font `sizes`: title, labels, ticks), integer outer passes, a
    grid, and a log y when the values span more than LOG_Y_RATIO."""
    ax.set_title(title, fontsize=sizes[0])
    ax.set_xlabel("outer pass (0 = before training)", fontsize=sizes[1])
    ax.set_ylabel(ylabel, fontsize=sizes[1])
    ax.tick_params(labelsize=sizes[2])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ys and min(ys) > 0 and max(ys) / min(ys) > LOG_Y_RATIO:
        ax.set_yscale("log")
    ax.grid(True, which="major", color="0.88", linewidth=0.8)
    ax.set_axisbelow(True)


def render(loss_curve: Sequence, heldout: Sequence | None = None, *,
           job: str | None = None, scale: str | None = None) -> Figure:
    """The picture as a matplotlib Figure (not yet encoded); SparkError for bad values."""
    train = _points(loss_curve, "loss_curve")
    if not train:
        raise SparkError("loss_curve is empty; nothing to plot")
    held = _points(heldout or [], "heldout")
    ys = [y for _, y in train + held]

    with matplotlib.style.context("default"):
        title = [p for p in (job, f"scale {scale}" if scale else None) if p]
        fig = Figure(figsize=SIZE_IN, dpi=DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        style_axes(ax, " · ".join(title + ["loss per outer pass"]),
                   "loss (cross-entropy, nats per token)", ys, (14, 12, 11))
        tx, ty = zip(*train)
        ax.plot(tx, ty, color=TRAIN_COLOR, linewidth=2, marker="o", markersize=6,
                label=f"training loss, whole dataset (last {ty[-1]:.4g})")
        if len({x for x, _ in held}) > 1:            # a held-out loss per pass
            hx, hy = zip(*held)
            ax.plot(hx, hy, color=HELDOUT_COLOR, linewidth=2, linestyle="--", marker="s",
                    markersize=7, label=f"held-out loss (last {hy[-1]:.4g})")
        elif held:   # only the final held-out loss exists: a marker and a reference line
            for i, (x, y) in enumerate(held):
                ax.axhline(y, color=HELDOUT_COLOR, linewidth=1.2, linestyle=":", zorder=1)
                ax.plot([x], [y], color=HELDOUT_COLOR, linewidth=1.2, linestyle=":", marker="s",
                        markersize=9, label=None if i else
                        f"held-out loss after the last pass ({y:.4g})")
        xs = [x for x, _ in train + held]
        if min(xs) == max(xs):
            ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
        ax.legend(fontsize=11, loc="best", framealpha=0.95)
        fig.tight_layout()
    return fig


def write_figure(path: str | os.PathLike, fig: Figure) -> bytes:
    """A Figure as PNG (no Software/version text in the file), written atomically; its bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    atomic_write_bytes(path, buf.getvalue())
    return buf.getvalue()


def write_loss_png(path: str | os.PathLike, loss_curve: Sequence,
                   heldout: Sequence | None = None, *,
                   job: str | None = None, scale: str | None = None) -> bytes:
    """The training curve (blue) and held-out loss (red; both [{"outer": k, "loss": x}, ...]
    or [(k, x), ...]) as a PNG, titled with job and scale, written atomically; its bytes."""
    return write_figure(path, render(loss_curve, heldout, job=job, scale=scale))


def heldout_points(ev, curve: Sequence, path) -> list:
    """The held-out losses to draw: the curve's per-pass `heldout_loss`, else the eval
    JSON's at the last pass (a top-level "loss", an object of such results, or an
    explicit "heldout" list of {outer, loss})."""
    per_pass = [{"outer": c["outer"], "loss": c["heldout_loss"]} for c in curve
                if isinstance(c, dict) and "heldout_loss" in c and "outer" in c]
    if len(per_pass) > 1:
        return per_pass
    last = max((c.get("outer", i) for i, c in enumerate(curve) if isinstance(c, dict)),
               default=len(curve) - 1)
    if isinstance(ev, dict):
        if isinstance(ev.get("heldout"), list):
            return ev["heldout"]
        if is_number(ev.get("loss")):
            return [{"outer": last, "loss": ev["loss"]}]
        nested = [v["loss"] for _, v in sorted(ev.items())
                  if isinstance(v, dict) and is_number(v.get("loss"))]
        if nested:
            return [{"outer": last, "loss": x} for x in nested]
    raise SparkError(f"eval file {path} has no held-out 'loss' to plot")
