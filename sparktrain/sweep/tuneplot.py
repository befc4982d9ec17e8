"""`spark tune`'s picture: the objective of each trial with the best-so-far line, then a
panel per tuned param against the objective (a log axis for `log:` ranges). Pruned trials
are drawn at the last held-out figure they reported, as crosses. Written like `spark
compare`'s (eval/plot.py: the same size, style and PNG writer)."""
from __future__ import annotations

import os
from dataclasses import dataclass

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from sparktrain.eval.plot import AXIS_FONTS, DPI, FIG_WIDTH_IN, write_figure

DONE_COLOR, PRUNED_COLOR, BEST_COLOR = "#1f77b4", "#d62728", "#2ca02c"
PANEL_COLUMNS = 3


@dataclass(frozen=True)
class TrialPoint:
    number: int
    pruned: bool
    value: float               # the objective, or a pruned trial's last reported figure
    params: dict               # key -> value


def render_tune(title: str, metric: str, dims: list[tuple[str, str]], points) -> Figure:
    """`dims`: (key, kind) of each param, kind as space.Dimension's."""
    panels = 1 + len(dims)
    rows = -(-panels // PANEL_COLUMNS)
    cols = min(panels, PANEL_COLUMNS)
    with matplotlib.style.context("default"):
        fig = Figure(figsize=(FIG_WIDTH_IN if cols < 3 else 12.0, 3.6 * rows + 0.6), dpi=DPI,
                     layout="constrained")
        FigureCanvasAgg(fig)
        fig.suptitle(title, fontsize=AXIS_FONTS[0] + 1)
        axes = list(fig.subplots(rows, cols, squeeze=False).flat)
        _history(axes[0], metric, points)
        for ax, (key, kind) in zip(axes[1:], dims):
            _param(ax, key, kind, metric, points)
        for ax in axes[panels:]:
            ax.set_visible(False)
    return fig


def _scatter(ax, xs, points) -> None:
    for pruned, colour, marker, label in ((False, DONE_COLOR, "o", "complete"),
                                          (True, PRUNED_COLOR, "x", "pruned (last pass)")):
        chosen = [(x, p.value) for x, p in zip(xs, points) if p.pruned == pruned]
        if chosen:
            ax.scatter(*zip(*chosen), color=colour, marker=marker, s=30, label=label, zorder=3)


def _history(ax, metric: str, points) -> None:
    _scatter(ax, [p.number for p in points], points)
    best, line = float("inf"), []
    for p in sorted(points, key=lambda p: p.number):
        if not p.pruned:
            best = min(best, p.value)
        if best < float("inf"):
            line.append((p.number, best))
    if line:
        ax.step(*zip(*line), where="post", color=BEST_COLOR, linewidth=1.8, label="best so far")
    ax.set_xlabel("trial", fontsize=AXIS_FONTS[1])
    ax.set_ylabel(metric, fontsize=AXIS_FONTS[1])
    ax.legend(fontsize=AXIS_FONTS[2], loc="best", framealpha=0.8)
    ax.grid(alpha=0.3)


def _param(ax, key: str, kind: str, metric: str, points) -> None:
    values = [p.params.get(key) for p in points]
    if kind == "choice":
        labels = sorted({str(v) for v in values})
        _scatter(ax, [labels.index(str(v)) for v in values], points)
        ax.set_xticks(range(len(labels)), labels)
    else:
        _scatter(ax, values, points)
        if kind == "log":
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())   # labelled minor ticks collide
    ax.set_xlabel(key, fontsize=AXIS_FONTS[1])
    ax.set_ylabel(metric, fontsize=AXIS_FONTS[1])
    ax.grid(alpha=0.3)


def write_tune_png(path: str | os.PathLike, title: str, metric: str, dims, points) -> bytes:
    return write_figure(path, render_tune(title, metric, dims, points))
