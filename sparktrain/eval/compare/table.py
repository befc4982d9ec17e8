"""`spark compare`, the text (runs, metrics, curves in 80 columns), and `render`,
the one printer of the experiments tables (`spark sweep`'s too)."""
from __future__ import annotations

import io
import json
import sys
import textwrap

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sparktrain.core.errors import columns
from sparktrain.eval.compare.runs import (Experiment, label_texts, short_key, short_value,
                                          short_values)
from sparktrain.eval.headline import HEADLINE_KEYS

# Short headers keep the table inside 80 columns.
TABLE_HEADS = {"loss": "held-out", "bpb": "bpb", "zlib9_bpb": "zlib9", "lzma9e_bpb": "lzma9e",
               "perplexity": "ppl", "next_token_accuracy": "acc", "exact_match": "exact",
               "copy_recall": "copy"}
WIDTH = 80   # the terminal the table is laid out for


def render(head: list[str], rows: list[list[str]], rule: bool = False,
           tty: bool | None = None) -> list[str]:
    """A table's lines: rich (no colour) when `tty` (default: stdout is a terminal), else
    errors.columns, a dashed rule under the head when `rule`."""
    if not (sys.stdout.isatty() if tty is None else tty):
        return columns(head, rows, rule=rule)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  padding=(0, 1, 0, 0))  # two spaces between columns, as `columns`
    for h in head:  # Text: a cell is never read as rich markup
        table.add_column(Text(h))
    for row in rows:
        table.add_row(*(Text(str(c)) for c in row))
    console = Console(file=io.StringIO(), width=10_000, color_system=None)
    console.print(table)
    return [ln.rstrip() for ln in console.file.getvalue().splitlines()]


def format_table(sweep: dict, tty: bool | None = None) -> str:
    """The runs, numbered as in the legend: one table within WIDTH, else a key of
    params and the metrics table beside the numbers; then the curves, a row per run."""
    keys, exps = sweep["changed_params"], sweep["experiments"]
    shared = sweep.get("shared_params") or {}
    metric_keys = [k for k in HEADLINE_KEYS if any(k in e.metrics for e in exps)]
    metric_head = ["train", *(TABLE_HEADS.get(k, k) for k in metric_keys)]
    metric_cells = [[_metric("loss", e.loss_curve[-1]["loss"]),
                     *(_metric(k, e.metrics.get(k)) for k in metric_keys)] for e in exps]
    short = [short_values([e.params.get(k) for e in exps]) for k in keys]
    names = [f"{e.number:>{len(str(len(exps)))}} {e.name}" for e in exps]  # "1 swept-hulk"
    lines = textwrap.wrap(f"{len(exps)} experiment{'s' * (len(exps) != 1)}; params that "
                          f"differ: {', '.join(keys) or 'none'}", WIDTH - 2)
    if shared:
        lines += textwrap.wrap("the same in all, not in the baseline: " + " ".join(
            f"{k}={short_value(v)}" for k, v in shared.items()), WIDTH - 2)
    lines.append("")
    table = render(["experiment", *(short_key(k, keys) for k in keys), *metric_head],
                   [[n, *(col[i] for col in short), *m]
                    for i, (n, m) in enumerate(zip(names, metric_cells))], tty=tty)
    if max(len(ln) for ln in table) > WIDTH:
        runs = render(["experiment", *(short_key(k, keys) for k in keys)],
                      [[n, *(col[i] for col in short)] for i, n in enumerate(names)], tty=tty)
        if max(len(ln) for ln in runs) > WIDTH:    # a key: each run's params, wrapped
            w = max(len(n) for n in names) + 2
            runs = [ln for name, text in zip(names, label_texts(exps, keys))
                    for ln in textwrap.wrap(text, WIDTH, initial_indent=name.ljust(w),
                                            subsequent_indent=" " * w,
                                            break_on_hyphens=False)]
        lines += [*runs, ""]
        table = render(["experiment", *metric_head],
                       [[n, *m] for n, m in zip(names, metric_cells)], tty=tty)
        if max(len(ln) for ln in table) > WIDTH:
            table = render(["#", *metric_head],
                           [[str(e.number), *m] for e, m in zip(exps, metric_cells)], tty=tty)
    lines += table
    key = "train: training loss after the last pass; on the held-out data: " + ", ".join(
        f"{TABLE_HEADS.get(k, k)} = {k}" for k in metric_keys)
    if "bpb" in metric_keys:
        key += " (bpb: the whole held-out stream; the per-pass bpb is a 64-window estimate)"
    lines += ["", *textwrap.wrap(key, WIDTH - 2)]
    lines += _curve_block("training loss per outer pass", exps, lambda e: e.loss_curve, "loss", tty)
    lines += _curve_block("held-out loss per outer pass", [e for e in exps if len(e.heldout) > 1],
                          lambda e: e.heldout, "loss", tty)
    lines += _curve_block("64-window estimate of held-out bits per byte per outer pass",
                          [e for e in exps if len(e.heldout_bpb) > 1],
                          lambda e: e.heldout_bpb, "bpb", tty)
    return "\n".join(lines) + "\n"


def _curve_block(title: str, exps: list[Experiment], curve, key: str, tty) -> list[str]:
    """A row per run, a column per outer pass (evenly spaced ones when over WIDTH)."""
    if not exps:
        return []
    outers = sorted({p["outer"] for e in exps for p in curve(e)})
    cells = {(e.number, p["outer"]): _metric(key, p[key]) for e in exps for p in curve(e)}
    num_w = max(len("run"), len(str(len(exps))))
    cell_w = max(len(c) for c in cells.values())
    fit = max(2, (WIDTH - num_w) // (cell_w + 2))
    shown = outers
    if len(outers) > fit:
        step = (len(outers) - 1) / (fit - 1)
        shown = sorted({outers[round(i * step)] for i in range(fit)})
        title += f" ({len(shown)} of {len(outers)} passes)"
    rows = [[str(e.number), *(cells.get((e.number, o), "-") for o in shown)] for e in exps]
    return ["", f"{title}, a row per run", "",
            *render(["run", *(json.dumps(o) for o in shown)], rows, tty=tty)]  # finite numbers


def _metric(key: str, v) -> str:
    """Losses to 4 decimals, perplexity to 1, rates (accuracy, match, recall) to 3."""
    digits = 4 if key in ("loss", "bpb") else 1 if key == "perplexity" else 3
    return "-" if v is None else f"{v:.{digits}f}"
