"""`spark compare`, the picture: a panel per unit measured, one numbered legend under them
(docs/pipeline.md "Sweep and compare")."""
from __future__ import annotations

import os
import textwrap

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sparktrain.eval.compare.runs import UNITS, Experiment
from sparktrain.eval.headline import is_finite
from sparktrain.eval.plot import DPI, style_axes, write_figure

FIG_WIDTH_IN, BASE_HEIGHT_IN = 8.0, 4.76   # 800 x 500 px with one legend row; each row adds height
LEGEND_ROW_IN = 0.24      # one legend entry of one line
LEGEND_LINE_IN = 0.155    # each further line of a wrapped entry
LEGEND_CHARS = 100        # characters of legend text one row holds at LEGEND_FONT
LEGEND_FONT = 9
AXIS_FONTS = (11, 10, 9)   # title, axis labels, ticks
MAX_LEGEND_COLUMNS = 4
REFERENCES = (("zlib9_bpb", "zlib-9", (0, (5, 3))), ("lzma9e_bpb", "lzma-9e", (0, (1, 2))))
LINE_STYLES = ("-", "--", "-.", ":")
LEGEND_TITLES = {"loss": "loss: ● training  ■ held-out",
                 "bpb": "bits per byte: ■ held-out (per pass: 64-window estimate)"}


def run_styles(n: int) -> list[tuple[str, str]]:
    """(colour, line style) of each of n runs, no two alike up to 80 (tab20, dark first)."""
    tab = matplotlib.colormaps["tab20" if n > 10 else "tab10"].colors
    colours = [matplotlib.colors.to_hex(c) for c in (tab[0::2] + tab[1::2] if n > 10 else tab)]
    return [(colours[i % len(colours)], LINE_STYLES[(i + i // len(colours)) % len(LINE_STYLES)])
            for i in range(n)]


def legend_layout(texts: list[str]) -> tuple[int, list[str], float]:
    """(columns, wrapped entries, height in inches) of the least tall legend; never cut."""
    best = None
    for ncol in range(min(MAX_LEGEND_COLUMNS, len(texts)), 0, -1):
        width = LEGEND_CHARS // ncol - 6          # - the line sample and the gap
        wrapped = [textwrap.fill(t, width, break_on_hyphens=False, subsequent_indent="   ")
                   for t in texts]
        per_col = -(-len(texts) // ncol)
        height = max(sum(LEGEND_ROW_IN + LEGEND_LINE_IN * w.count("\n")
                         for w in wrapped[c * per_col:(c + 1) * per_col]) for c in range(ncol))
        if best is None or height < best[2] - 1e-9:
            best = (ncol, wrapped, height)
    return best


def render(sweep: dict) -> Figure:
    """A panel per unit measured (bpb beside the compressors), one numbered legend."""
    exps = sweep["experiments"]
    units = [u for u in ("loss", "bpb") if any(e.unit == u for e in exps)]
    with matplotlib.style.context("default"):
        styles = dict(zip((e.name for e in exps), run_styles(len(exps))))
        handles = [Line2D([], [], color=styles[e.name][0], linestyle=styles[e.name][1],
                          linewidth=2, label=f"{e.number}  {e.label}") for e in exps]
        refs = _references(exps) if "bpb" in units else []
        handles += [Line2D([], [], color="0.35", linestyle=style, linewidth=1.2, label=text)
                    for _, text, style in refs]
        ncol, texts, legend_in = legend_layout([h.get_label() for h in handles])
        fig = Figure(figsize=(FIG_WIDTH_IN, BASE_HEIGHT_IN + legend_in), dpi=DPI,
                     layout="constrained")
        FigureCanvasAgg(fig)
        fig.suptitle(f"sweep of {len(exps)} experiment{'s' * (len(exps) != 1)}", fontsize=13)
        axes = fig.subplots(1, len(units), squeeze=False)[0]
        for ax, unit in zip(axes, units):
            chosen = [e for e in exps if e.unit == unit]
            if unit == "loss":
                _loss_panel(ax, chosen, styles)
            else:
                _bpb_panel(ax, chosen, styles, refs)
        fig.legend(handles, texts, loc="outside lower center", ncol=ncol,
                   fontsize=LEGEND_FONT, frameon=False, handlelength=2.6,
                   title="    ".join(LEGEND_TITLES[u] for u in units), title_fontsize=LEGEND_FONT)
    return fig


def _end_number(ax, exp: Experiment, xs: list, ys: list, colour: str) -> None:
    """The run's number at the end of its curve, so a line is found without the legend."""
    ax.annotate(str(exp.number), (xs[-1], ys[-1]), xytext=(5, 0), textcoords="offset points",
                fontsize=7, color=colour, va="center", annotation_clip=True)


def _loss_panel(ax, exps: list[Experiment], styles: dict) -> None:
    ys = [p["loss"] for e in exps for p in e.loss_curve + e.heldout]
    style_axes(ax, *UNITS["loss"], ys, AXIS_FONTS)
    for exp in exps:
        colour, style = styles[exp.name]
        xs, ys = [p["outer"] for p in exp.loss_curve], [p["loss"] for p in exp.loss_curve]
        ax.plot(xs, ys, color=colour, linestyle=style, linewidth=2, marker="o", markersize=4)
        _end_number(ax, exp, xs, ys, colour)
        ax.plot([p["outer"] for p in exp.heldout], [p["loss"] for p in exp.heldout],
                color=colour, linestyle=style, linewidth=1, marker="s",
                markersize=6, markeredgecolor="black", markeredgewidth=0.6)


def _references(exps: list[Experiment]) -> list[tuple[float, str, object]]:
    """(bpb, legend text, line style) of each compressor's distinct figure in the bpb runs."""
    found = []
    for key, name, style in REFERENCES:
        for value in sorted({e.metrics[key] for e in exps
                             if e.unit == "bpb" and is_finite(e.metrics.get(key))}):
            found.append((value, f"{name} ({value:.3f} bpb)", style))
    return found


def _bpb_panel(ax, exps: list[Experiment], styles: dict, refs: list) -> None:
    ys = [p["bpb"] for e in exps for p in e.heldout_bpb] + [v for v, _, _ in refs]
    style_axes(ax, *UNITS["bpb"], ys, AXIS_FONTS)
    for exp in exps:
        colour, style = styles[exp.name]
        xs, ys = [p["outer"] for p in exp.heldout_bpb], [p["bpb"] for p in exp.heldout_bpb]
        ax.plot(xs, ys, color=colour, linestyle=style, linewidth=2, marker="s", markersize=5)
        _end_number(ax, exp, xs, ys, colour)
    for value, _, style in refs:
        ax.axhline(value, color="0.35", linestyle=style, linewidth=1.2)


def write_png(path: str | os.PathLike, sweep: dict) -> bytes:
    return write_figure(path, render(sweep))
