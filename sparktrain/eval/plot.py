"""The loss picture (docs/outputs.md, loss.png), and `spark compare`'s picture: a panel per
unit measured, one numbered legend under them (docs/pipeline.md "Sweep and compare"), of the
runs eval/compare.py reads; only these plots load matplotlib (slow to import)."""
from __future__ import annotations

import io
import os
import textwrap
from dataclasses import replace
from typing import Sequence

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from sparktrain.data.source import PairsSource
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import atomic_write_bytes
from sparktrain.core.values import is_finite, is_number
from sparktrain.core.metric_keys import BASELINE_BPB
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


# what a pairs job's curve points measure (each data source's `curve_labels` says its own)
CURVE_LABELS = PairsSource.curve_labels


def render(loss_curve: Sequence, heldout: Sequence | None = None, *,
           job: str | None = None, scale: str | None = None,
           labels: tuple[str, str] = CURVE_LABELS) -> Figure:
    """The picture as a matplotlib Figure (not yet encoded); SparkError for bad values.
    `labels`: what the training and the per-pass held-out points measure."""
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
                label=f"{labels[0]} (last {ty[-1]:.4g})")
        if len({x for x, _ in held}) > 1:            # a held-out loss per pass
            hx, hy = zip(*held)
            ax.plot(hx, hy, color=HELDOUT_COLOR, linewidth=2, linestyle="--", marker="s",
                    markersize=7, label=f"{labels[1]} (last {hy[-1]:.4g})")
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


def figure_png(fig: Figure) -> bytes:
    """A Figure as PNG bytes (no Software/version text in the file)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def write_figure(path: str | os.PathLike, fig: Figure) -> bytes:
    """A Figure as PNG, written atomically; its bytes."""
    data = figure_png(fig)
    atomic_write_bytes(path, data)
    return data


def loss_png(loss_curve: Sequence, heldout: Sequence | None = None, *,
             job: str | None = None, scale: str | None = None,
             labels: tuple[str, str] = CURVE_LABELS) -> bytes:
    """The training curve (blue) and held-out loss (red; both [{"outer": k, "loss": x}, ...]
    or [(k, x), ...]) as PNG bytes, titled with job and scale."""
    return figure_png(render(loss_curve, heldout, job=job, scale=scale, labels=labels))


def write_loss_png(path: str | os.PathLike, loss_curve: Sequence,
                   heldout: Sequence | None = None, *,
                   job: str | None = None, scale: str | None = None,
                   labels: tuple[str, str] = CURVE_LABELS) -> bytes:
    """`loss_png`, written atomically; its bytes."""
    data = loss_png(loss_curve, heldout, job=job, scale=scale, labels=labels)
    atomic_write_bytes(path, data)
    return data


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


FIG_WIDTH_IN, BASE_HEIGHT_IN = 8.0, 4.76   # 800 x 500 px with one legend row; each row adds height
LEGEND_ROW_IN = 0.24      # one legend entry of one line
LEGEND_LINE_IN = 0.155    # each further line of a wrapped entry
LEGEND_CHARS = 100        # characters of legend text one row holds at LEGEND_FONT
LEGEND_FONT = 9
AXIS_FONTS = (11, 10, 9)   # title, axis labels, ticks
MAX_LEGEND_COLUMNS = 4
# The compressors on the same held-out bytes (core/metric_keys.py BASELINE_BPB), cold ones first, then
# the primed, each drawn with its own dashes
REFERENCES = tuple(zip(sorted(BASELINE_BPB, key=lambda key: "primed" in key),
                       ((0, (5, 3)), (0, (1, 2)), (0, (3, 1, 1, 1)), (0, (8, 2)),
                        (0, (3, 1, 1, 1, 1, 1)))))
LINE_STYLES = ("-", "--", "-.", ":")
LEGEND_TITLES = {"loss": "loss: ● training  ■ held-out",
                 "bpb": "bits per byte: ■ held-out (per pass: 64-window estimate)"}
# What a held-out record measured -> its panel (bits per byte when it has bpb, else nats)
UNITS = {"bpb": ("held-out text", "bits per byte"),
         "loss": ("pairs jobs", "loss (cross-entropy, nats per token)")}
PANELS = {"loss": ("loss_curve", "o", 4), "bpb": ("heldout_bpb", "s", 5)}  # curve, its markers


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


def render_compare(sweep: dict) -> Figure:
    """A panel per unit measured (bpb beside the compressors), one numbered legend."""
    exps = sweep["experiments"]
    units = [u for u in ("loss", "bpb") if any(e.unit == u for e in exps)]
    with matplotlib.style.context("default"):
        styles = dict(zip((e.name for e in exps), run_styles(len(exps))))
        handles = [Line2D([], [], color=styles[e.name][0], linestyle=styles[e.name][1],
                          linewidth=2, label=f"{e.number}  {e.label}") for e in exps]
        refs = _references(exps, styles) if "bpb" in units else []
        handles += [Line2D([], [], color=colour, linestyle=style, linewidth=1.2, label=text)
                    for _, text, style, colour in refs]
        ncol, texts, legend_in = legend_layout([h.get_label() for h in handles])
        fig = Figure(figsize=(FIG_WIDTH_IN, BASE_HEIGHT_IN + legend_in), dpi=DPI,
                     layout="constrained")
        FigureCanvasAgg(fig)
        fig.suptitle(f"sweep of {len(exps)} experiment{'s' * (len(exps) != 1)}", fontsize=13)
        axes = fig.subplots(1, len(units), squeeze=False)[0]
        for ax, unit in zip(axes, units):
            _panel(ax, unit, [e for e in exps if e.unit == unit], styles,
                   refs if unit == "bpb" else [])
        fig.legend(handles, texts, loc="outside lower center", ncol=ncol,
                   fontsize=LEGEND_FONT, frameon=False, handlelength=2.6,
                   title="    ".join(LEGEND_TITLES[u] for u in units), title_fontsize=LEGEND_FONT)
    return fig


def _end_number(ax, exp, xs: list, ys: list, colour: str) -> None:
    """The run's number at the end of its curve, so a line is found without the legend."""
    ax.annotate(str(exp.number), (xs[-1], ys[-1]), xytext=(5, 0), textcoords="offset points",
                fontsize=7, color=colour, va="center", annotation_clip=True)


def _panel(ax, unit: str, exps: list, styles: dict, refs: list) -> None:
    """A unit's panel: each run's curve (PANELS), its number at the end; a loss panel draws
    the held-out losses too, a bpb panel the compressors' lines (`refs`)."""
    curve, marker, size = PANELS[unit]
    ys = [p[unit] for e in exps for p in getattr(e, curve) + (e.heldout if unit == "loss" else [])]
    style_axes(ax, *UNITS[unit], ys + [ref[0] for ref in refs], AXIS_FONTS)
    for exp in exps:
        colour, style = styles[exp.name]
        xs, ys = [p["outer"] for p in getattr(exp, curve)], [p[unit] for p in getattr(exp, curve)]
        ax.plot(xs, ys, color=colour, linestyle=style, linewidth=2, marker=marker,
                markersize=size)
        _end_number(ax, exp, xs, ys, colour)
        if unit == "loss" and exp.heldout:
            hx, hy = [p["outer"] for p in exp.heldout], [p["loss"] for p in exp.heldout]
            ax.plot(hx, hy, color=colour, linestyle=style, linewidth=1, marker="s",
                    markersize=6, markeredgecolor="black", markeredgewidth=0.6)
            _end_number(ax, exp, hx, hy, colour)
    for value, _, style, colour in refs:
        ax.axhline(value, color=colour, linestyle=style, linewidth=1.2, alpha=0.7)


def _references(exps: list, styles: dict) -> list[tuple[float, str, object, str]]:
    """(bpb, legend text, line style, colour) of each compressor's distinct figure in the
    bpb runs: one held-out text each, named by the runs measured on it (their job) and
    drawn in the colour of the first of them, so two corpora's lines are told apart."""
    found = []
    for key, style in REFERENCES:
        name = BASELINE_BPB[key]
        runs: dict[float, list] = {}
        for e in exps:
            if e.unit == "bpb" and is_finite(e.metrics.get(key)):
                runs.setdefault(e.metrics[key], []).append(e)
        for value, on in sorted(runs.items()):
            jobs = sorted({str(e.params["job"]) for e in on if e.params.get("job")})
            where = f"; {', '.join(jobs)}" if jobs else ""
            numbers = ", ".join(str(e.number) for e in on)
            found.append((value, f"{name} ({value:.3f} bpb): run{'s' * (len(on) > 1)} "
                                 f"{numbers}{where}", style, styles[on[0].name][0]))
    return found


def write_compare_png(path: str | os.PathLike, sweep: dict) -> bytes:
    return write_figure(path, render_compare(sweep))
