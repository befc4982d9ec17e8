"""`spark compare`: the picture of a sweep, read through DVC's Python API.

The experiments (names, revs, their baseline) come from the one reader of
experiments, sparktrain/repro/experiments.py (`dvc.api.exp_show`); each one's
params.yaml, eval.json and checkpoint.json are read at its rev through the same
reader (`dvc.api.open`: the commit's files, the outputs from the DVC cache).
Nothing is fetched, so it works offline (`dvc exp pull` first for experiments
made elsewhere). A subset is picked by name, by a param's value (`--where`)
or the last N.

One figure, a panel per unit the eval records measured: training loss per outer
pass (solid) and held-out loss (per pass when the checkpoint logs
`heldout_loss`, else one marker at the last pass from eval.json) in nats per
token; held-out bits per byte beside the compressors' figures that eval
recorded (zlib-9, lzma-9e). The runs are numbered: the legend under the panels
names each one by the params that differ across the chosen runs (wrapped, never
cut), and the table's first column carries the same numbers.
See docs/pipeline.md ("Sweep and compare").
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Sequence

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from sparktrain.core.errors import SparkError
from sparktrain.eval.headline import HEADLINE_KEYS
from sparktrain.eval.plot import DPI, LOG_Y_RATIO, png_bytes
from sparktrain.core.fsutil import atomic_write_bytes
from sparktrain.core.jobfiles import CHECKPOINT, EVAL, job_dir
from sparktrain.params import MAX_OUTER, Defaults
from sparktrain.repro.experiments import DvcExperiments, Experiments, ExpRow, read_json, read_yaml
from sparktrain.core.safeload import load_yaml

# values in one experiment's checkpoint.json: 3 a curve point, outer + 1 points at most
CHECKPOINT_ITEMS = 4 * (MAX_OUTER + 1) + 10_000

PARAMS_FILE = "params.yaml"
# A metric with these keys beside the headline ones is the layout from before
# eval_detail.json: the headline numbers are still read from it.
OLD_LAYOUT_KEYS = ("families", "samples", "weights_sha256")
# What a held-out record measured, and the panel it is drawn on: a record with
# bits per byte is drawn in bits per byte (beside the compressors), else in nats.
UNITS = {"bpb": ("held-out text", "bits per byte"),
         "loss": ("pairs jobs", "loss (cross-entropy, nats per token)")}


@dataclass
class Experiment:
    name: str
    rev: str
    baseline: str
    params: dict                 # params.yaml, flattened to dotted keys, defaults filled in
    metrics: dict                # the headline numbers of its eval.json
    old_layout: bool             # eval.json from before eval_detail.json
    loss_curve: list = field(default_factory=list)   # [{"outer", "loss"}, ...]
    heldout: list = field(default_factory=list)      # [{"outer", "loss"}, ...]
    heldout_bpb: list = field(default_factory=list)  # [{"outer", "bpb"}, ...]
    label: str = ""
    number: int = 0              # its key in the legend and the table (1, 2, ...)

    @property
    def unit(self) -> str:
        """What its held-out record measured: "bpb" (bits per byte) or "loss" (nats)."""
        return "bpb" if _is_finite(self.metrics.get("bpb")) else "loss"


# --- reading experiments through DVC ----------------------------------------

def flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _defaults() -> dict:
    """Every knob's default, flattened: what params.yaml means where it says nothing."""
    return flatten(dataclasses.asdict(Defaults()))


def resolved_params(raw) -> dict:
    """params.yaml flattened, an unset (or null) knob as its default: a run that
    leaves `step.optimizer` out trains with sgd, and is not different from one
    that writes `optimizer: sgd`."""
    flat = flatten(raw if isinstance(raw, dict) else {})
    for key, value in _defaults().items():
        nested = any(k.startswith(f"{key}.") for k in flat)
        if flat.get(key) is None and value is not None and not nested:
            flat[key] = value
    return flat


def choose(experiments: list[ExpRow], baselines: list[ExpRow], wanted: Sequence[str]) -> list[ExpRow]:
    """The rows named (an experiment by name or rev prefix, a baseline by its branch
    name), or all experiments when none is named."""
    if not wanted:
        if not experiments:
            raise SparkError("no experiments yet in this workspace; run some with "
                             "`dvc exp run -S step.lr=0.05` (see `dvc exp show`)")
        return list(experiments)
    chosen = []
    for want in wanted:
        found = [r for r in experiments + baselines if r.name == want
                 or (len(want) >= 7 and len(r.rev) >= 7
                     and (r.rev.startswith(want) or want.startswith(r.rev)))]
        if not found:
            have = ", ".join(r.name for r in experiments) or "none yet"
            raise SparkError(f"no experiment named {want!r} (experiments: {have}); "
                             f"list them with `dvc exp show`")
        if found[0] not in chosen:
            chosen.append(found[0])
    return chosen


def record(row: ExpRow, source: Experiments) -> Experiment:
    """An experiment's params and headline numbers; the eval.json from before
    eval_detail.json (every number in one file) is read too."""
    params = resolved_params(read_yaml(source, PARAMS_FILE, row.rev))
    metric_path = (job_dir(str(params.get("job"))) / EVAL).as_posix()
    metric = read_json(source, metric_path, row.rev)
    if not isinstance(metric, dict) or not _is_number(metric.get("loss")):
        raise SparkError(f"experiment {row.name}: no held-out loss in {metric_path} "
                         f"(not run, or a layout this version cannot read); "
                         f"re-run it: `dvc exp apply {row.name} && dvc exp run`")
    return Experiment(name=row.name, rev=row.rev, baseline=row.baseline, params=params,
                      metrics={k: metric[k] for k in HEADLINE_KEYS if k in metric},
                      old_layout=any(k in metric for k in OLD_LAYOUT_KEYS))


def read_checkpoint(exp: Experiment, source: Experiments) -> dict:
    """An experiment's checkpoint.json as its commit recorded it (from the DVC cache)."""
    path = (job_dir(str(exp.params.get("job"))) / CHECKPOINT).as_posix()
    try:
        # a checkpoint holds outer + 1 points (step.outer is capped): far below this bound
        ckpt = read_json(source, path, exp.rev, max_items=CHECKPOINT_ITEMS)
    except SparkError as err:
        raise SparkError(f"experiment {exp.name}: its {path} is not readable ({err})") from None
    if ckpt is None:
        raise SparkError(f"experiment {exp.name}: its {path} is not in the DVC cache; "
                         f"fetch it with `dvc exp pull <remote> {exp.name}`")
    return ckpt


def add_curves(exp: Experiment, ckpt: dict) -> None:
    """Training curve from the checkpoint; held-out per pass where the checkpoint
    logs `heldout_loss`, else the final held-out loss at the last pass."""
    curve = ckpt.get("loss_curve") if isinstance(ckpt, dict) else None
    if not isinstance(curve, list) or not curve:
        raise SparkError(f"experiment {exp.name}: its checkpoint.json has no loss_curve")
    for i, item in enumerate(curve):
        outer = item.get("outer", i) if isinstance(item, dict) else None
        if not (_is_finite(outer) and _is_finite(item.get("loss"))):
            raise SparkError(f"experiment {exp.name}: loss_curve[{i}] is not "
                             f"{{outer, loss}} with finite numbers")
        exp.loss_curve.append({"outer": outer, "loss": item["loss"]})
        if _is_finite(item.get("heldout_loss")):
            exp.heldout.append({"outer": outer, "loss": item["heldout_loss"]})
        if _is_finite(item.get("heldout_bpb")):
            exp.heldout_bpb.append({"outer": outer, "bpb": item["heldout_bpb"]})
    if not exp.heldout and _is_finite(exp.metrics.get("loss")):
        exp.heldout.append({"outer": exp.loss_curve[-1]["outer"], "loss": exp.metrics["loss"]})
    if not exp.heldout_bpb and _is_finite(exp.metrics.get("bpb")):
        exp.heldout_bpb.append({"outer": exp.loss_curve[-1]["outer"], "bpb": exp.metrics["bpb"]})


def _differ(exps: list[Experiment], keys: list[str]) -> list[str]:
    return [k for k in keys if len({json.dumps(e.params.get(k)) for e in exps}) > 1]


def changed_params(chosen: list[Experiment], baselines: list[Experiment]) -> tuple[list[str], dict]:
    """(the params that differ among the chosen runs, {param: value} the chosen runs
    share but their baseline does not). One run alone is told by what differs
    from its baseline."""
    keys = sorted({k for e in chosen + baselines for k in e.params})
    if len(chosen) < 2:
        return _differ(chosen + baselines, keys), {}
    differ = _differ(chosen, keys)
    shared = {k: chosen[0].params.get(k) for k in _differ(chosen + baselines, keys)
              if k not in differ}
    return differ, shared


def where_filter(specs: Sequence[str]):
    """`--where KEY=VALUE` (KEY dotted or its last part, VALUE as YAML or as shown):
    a predicate on an Experiment; a malformed spec is one line."""
    tests = []
    for spec in specs:
        key, sep, text = spec.partition("=")
        if not sep or not key:
            raise SparkError(f"--where {spec!r}: expected KEY=VALUE, e.g. --where lr=0.05")
        try:
            value = load_yaml(text, f"--where {spec}")
        except SparkError:
            value = text
        tests.append((key, text, value))

    def keep(exp: Experiment) -> bool:
        for key, text, value in tests:
            found = [k for k in exp.params if k == key or k.rsplit(".", 1)[-1] == key]
            if not any(exp.params[k] == value or short_value(exp.params[k]) == text
                       for k in found):
                return False
        return True
    return keep


def compare(wanted: Sequence[str] = (), source: Experiments | None = None, *,
            where: Sequence[str] = (), last: int | None = None) -> dict:
    """The sweep as data: the chosen experiments (named, else all; then those
    matching every `where`, then the `last` N) with their curves and labels."""
    keep = where_filter(where)
    if last is not None and last < 1:
        raise SparkError(f"--last must be >= 1, got {last}")
    if source is None:
        with DvcExperiments() as dvc_source:
            return compare(wanted, dvc_source, where=where, last=last)
    experiments, baselines = source.rows()
    chosen = [record(r, source) for r in choose(experiments, baselines, wanted)]
    chosen = [e for e in chosen if keep(e)]
    if not chosen:
        raise SparkError(f"no experiment has {' '.join(where)} (see `dvc exp show`)")
    chosen = chosen[-last:] if last else chosen
    for exp in chosen:
        add_curves(exp, read_checkpoint(exp, source))
    names = {e.name for e in chosen}
    refs = [_baseline(b, source) for b in baselines
            if b.name in {e.baseline for e in chosen} and b.name not in names]
    keys, shared = changed_params(chosen, refs)
    labels = label_texts(chosen, keys)
    for number, (exp, text) in enumerate(zip(chosen, labels), 1):
        exp.number = number
        # the same params twice (a re-run): the name tells them apart
        exp.label = f"{text} ({exp.name})" if labels.count(text) > 1 else text
    return {"changed_params": keys, "shared_params": shared, "experiments": chosen}


def _baseline(row: ExpRow, source: Experiments) -> Experiment:
    """A baseline as a reference for which params changed (its metric may be absent)."""
    params = resolved_params(read_yaml(source, PARAMS_FILE, row.rev))
    return Experiment(row.name, row.rev, row.name, params, {}, False)


LABEL_VALUE_CHARS = 18   # a longer value shows only what sets it apart from the others


def short_key(key: str, keys: list[str]) -> str:
    """The last part of a dotted key (`step.lr` -> `lr`) unless another key ends so too."""
    last = key.rsplit(".", 1)[-1]
    return last if sum(k.rsplit(".", 1)[-1] == last for k in keys) == 1 else key


def short_value(value) -> str:
    """A value as a label shows it: a path by its file's stem, null as `none`,
    a float in its shortest form."""
    if value is None:
        return "none"
    if isinstance(value, str):
        is_path = "/" in value and not any(c in value for c in "*?[")
        return PurePosixPath(value).stem if is_path else value
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value, separators=(",", ":"))


def short_values(values: list) -> list[str]:
    """The values of one param across the runs, each shortened without hiding what
    differs: a long value keeps the part that sets it apart from the others (and a
    few characters around it), the part they all share becomes `…`."""
    texts = [short_value(v) for v in values]
    if max((len(t) for t in texts), default=0) <= LABEL_VALUE_CHARS or len(set(texts)) < 2:
        return [t if len(t) <= LABEL_VALUE_CHARS else t[:LABEL_VALUE_CHARS - 1] + "…"
                for t in texts]
    prefix = len(os.path.commonprefix(texts))
    suffix = len(os.path.commonprefix([t[prefix:][::-1] for t in texts]))
    keep = 3   # shared characters kept beside the distinct part, for context
    out = []
    for t in texts:
        start, end = max(0, prefix - keep), len(t) - max(0, suffix - keep)
        if len(t) <= LABEL_VALUE_CHARS:
            out.append(t)
            continue
        part = t[start:end]
        out.append(("…" if start > 0 else "") + part + ("…" if end < len(t) else ""))
    return out


def label_texts(exps: list[Experiment], keys: list[str]) -> list[str]:
    """Each run's params that differ, shortened: `lr=0.05 program=…der-1`."""
    columns = [short_values([e.params.get(k) for e in exps]) for k in keys]
    return [" ".join(f"{short_key(k, keys)}={col[i]}" for k, col in zip(keys, columns))
            or exps[i].name for i in range(len(exps))]


def label(exp: Experiment, keys: list[str]) -> str:
    """One run's label on its own (compare() shortens across the chosen runs)."""
    return label_texts([exp], keys)[0]


# --- what it prints and draws ------------------------------------------------

def as_json(sweep: dict) -> dict:
    keys = sweep["changed_params"]
    return {
        "changed_params": keys,
        "shared_params": sweep.get("shared_params", {}),
        "experiments": [{
            "number": e.number, "name": e.name, "rev": e.rev, "baseline": e.baseline,
            "label": e.label, "params": {k: e.params.get(k) for k in keys},
            "metrics": e.metrics, "old_layout": e.old_layout, "unit": e.unit,
            "loss_curve": e.loss_curve, "heldout": e.heldout, "heldout_bpb": e.heldout_bpb,
        } for e in sweep["experiments"]],
    }


# Short headers keep the table inside 80 columns.
TABLE_HEADS = {"loss": "held-out", "bpb": "bpb", "zlib9_bpb": "zlib9", "lzma9e_bpb": "lzma9e",
               "perplexity": "ppl",
               "next_token_accuracy": "acc", "exact_match": "exact", "copy_recall": "copy"}
WIDTH = 80   # the terminal the table is laid out for


def _numbered(exps: list[Experiment]) -> list[str]:
    """`1 swept-hulk`, ... the run's number (its legend key) and name."""
    w = len(str(len(exps)))
    return [f"{e.number:>{w}} {e.name}" for e in exps]


def format_table(sweep: dict) -> str:
    """The runs, numbered as in the picture's legend: one table when it fits in
    WIDTH columns; else a key (number, name, the params that differ, wrapped)
    and the metrics table beside the numbers. Then the curves, a row per run."""
    keys, exps = sweep["changed_params"], sweep["experiments"]
    shared = sweep.get("shared_params") or {}
    metric_keys = [k for k in HEADLINE_KEYS if any(k in e.metrics for e in exps)]
    metric_head = ["train", *(TABLE_HEADS.get(k, k) for k in metric_keys)]
    metric_cells = [[_num(e.loss_curve[-1]["loss"]), *(_metric(k, e.metrics.get(k))
                                                       for k in metric_keys)] for e in exps]
    short = [short_values([e.params.get(k) for e in exps]) for k in keys]
    names = _numbered(exps)
    lines = textwrap.wrap(f"{len(exps)} experiment{'s' * (len(exps) != 1)}; params that "
                          f"differ: {', '.join(keys) or 'none'}", WIDTH - 2)
    if shared:
        lines += textwrap.wrap("the same in all, not in the baseline: " + " ".join(
            f"{k}={short_value(v)}" for k, v in shared.items()), WIDTH - 2)
    lines.append("")
    table = _columns(["experiment", *(short_key(k, keys) for k in keys), *metric_head],
                     [[n, *(col[i] for col in short), *m]
                      for i, (n, m) in enumerate(zip(names, metric_cells))])
    if max(len(ln) for ln in table) > WIDTH:
        runs = _columns(["experiment", *(short_key(k, keys) for k in keys)],
                        [[n, *(col[i] for col in short)] for i, n in enumerate(names)])
        if max(len(ln) for ln in runs) > WIDTH:    # a key: each run's params, wrapped
            w = max(len(n) for n in names) + 2
            runs = [ln for name, text in zip(names, label_texts(exps, keys))
                    for ln in textwrap.wrap(text, WIDTH, initial_indent=name.ljust(w),
                                            subsequent_indent=" " * w,
                                            break_on_hyphens=False)]
        lines += [*runs, ""]
        table = _columns(["experiment", *metric_head],
                         [[n, *m] for n, m in zip(names, metric_cells)])
        if max(len(ln) for ln in table) > WIDTH:
            table = _columns(["#", *metric_head],
                             [[str(e.number), *m] for e, m in zip(exps, metric_cells)])
    lines += table
    key = "train: training loss after the last pass; on the held-out data: " + ", ".join(
        f"{TABLE_HEADS.get(k, k)} = {k}" for k in metric_keys)
    if "bpb" in metric_keys:
        key += " (bpb: the whole held-out stream; the per-pass bpb is a 64-window estimate)"
    lines += ["", *textwrap.wrap(key, WIDTH - 2)]
    lines += _curve_block("training loss per outer pass", exps, lambda e: e.loss_curve, "loss")
    lines += _curve_block("held-out loss per outer pass", [e for e in exps if len(e.heldout) > 1],
                          lambda e: e.heldout, "loss")
    lines += _curve_block("64-window estimate of held-out bits per byte per outer pass",
                          [e for e in exps if len(e.heldout_bpb) > 1],
                          lambda e: e.heldout_bpb, "bpb")
    return "\n".join(lines) + "\n"


def _curve_block(title: str, exps: list[Experiment], curve, key: str) -> list[str]:
    """A row per run (its number), a column per outer pass; when the passes do not
    fit in WIDTH columns, evenly spaced ones (always the first and the last)."""
    if not exps:
        return []
    outers = sorted({p["outer"] for e in exps for p in curve(e)})
    cells = {(e.number, p["outer"]): _num(p[key]) for e in exps for p in curve(e)}
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
            *_columns(["run", *(_value(o) for o in shown)], rows)]


FIG_WIDTH_IN, BASE_HEIGHT_IN = 8.0, 4.76   # 800 x 500 px with one legend row; each row adds height
LEGEND_ROW_IN = 0.24      # one legend entry of one line
LEGEND_LINE_IN = 0.155    # each further line of a wrapped entry
LEGEND_CHARS = 100        # characters of legend text one row holds at LEGEND_FONT
LEGEND_FONT = 9
MAX_LEGEND_COLUMNS = 4
REFERENCES = (("zlib9_bpb", "zlib-9", (0, (5, 3))), ("lzma9e_bpb", "lzma-9e", (0, (1, 2))))
LINE_STYLES = ("-", "--", "-.", ":")


def run_styles(n: int) -> list[tuple[str, str]]:
    """(colour, line style) of each of n runs, no two alike (up to 80 runs): 20
    colours (tab20, the dark ten first), the style turning with every run and
    shifted once per round of colours."""
    import matplotlib

    tab = matplotlib.colormaps["tab20"].colors if n > 10 else \
        matplotlib.colormaps["tab10"].colors
    colours = [matplotlib.colors.to_hex(c) for c in (tab[0::2] + tab[1::2] if n > 10 else tab)]
    return [(colours[i % len(colours)], LINE_STYLES[(i + i // len(colours)) % len(LINE_STYLES)])
            for i in range(n)]


def legend_layout(texts: list[str]) -> tuple[int, list[str], float]:
    """(columns, the entries wrapped to their column's width, legend height in
    inches): the number of columns that makes the legend least tall; an entry too
    long for its column wraps onto more lines, never cut."""
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
    """A panel per unit the runs' eval records measured (nats per token; bits per
    byte beside the compressors), one numbered legend under them."""
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
        height = BASE_HEIGHT_IN + legend_in
        fig = Figure(figsize=(FIG_WIDTH_IN, height), dpi=DPI, layout="constrained")
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
                   title=_legend_title(units), title_fontsize=LEGEND_FONT)
    return fig


def _legend_title(units: list[str]) -> str:
    parts = []
    if "loss" in units:
        parts.append("loss: ● training  ■ held-out")
    if "bpb" in units:
        parts.append("bits per byte: ■ held-out (per pass: 64-window estimate)")
    return "    ".join(parts)


def _style_axes(ax, title: str, ylabel: str, ys: list[float]) -> None:
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("outer pass (0 = before training)", fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.tick_params(labelsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ys and min(ys) > 0 and max(ys) / min(ys) > LOG_Y_RATIO:
        ax.set_yscale("log")
    ax.grid(True, which="major", color="0.88", linewidth=0.8)
    ax.set_axisbelow(True)


def _end_number(ax, exp: Experiment, xs: list, ys: list, colour: str) -> None:
    """The run's number at the end of its curve, so a line is found without the legend."""
    ax.annotate(str(exp.number), (xs[-1], ys[-1]), xytext=(5, 0), textcoords="offset points",
                fontsize=7, color=colour, va="center", annotation_clip=True)


def _loss_panel(ax, exps: list[Experiment], styles: dict) -> None:
    ys = [p["loss"] for e in exps for p in e.loss_curve + e.heldout]
    _style_axes(ax, *UNITS["loss"], ys)
    for exp in exps:
        colour, style = styles[exp.name]
        xs, ys = [p["outer"] for p in exp.loss_curve], [p["loss"] for p in exp.loss_curve]
        ax.plot(xs, ys, color=colour, linestyle=style, linewidth=2, marker="o", markersize=4)
        _end_number(ax, exp, xs, ys, colour)
        ax.plot([p["outer"] for p in exp.heldout], [p["loss"] for p in exp.heldout],
                color=colour, linestyle=style, linewidth=1, marker="s",
                markersize=6, markeredgecolor="black", markeredgewidth=0.6)


def _references(exps: list[Experiment]) -> list[tuple[float, str, object]]:
    """(bpb, legend text, line style) of each compressor's distinct figure that the
    bits-per-byte runs' eval records measured."""
    found = []
    for key, name, style in REFERENCES:
        for value in sorted({e.metrics[key] for e in exps
                             if e.unit == "bpb" and _is_finite(e.metrics.get(key))}):
            found.append((value, f"{name} ({value:.3f} bpb)", style))
    return found


def _bpb_panel(ax, exps: list[Experiment], styles: dict, refs: list) -> None:
    ys = [p["bpb"] for e in exps for p in e.heldout_bpb] + [v for v, _, _ in refs]
    _style_axes(ax, *UNITS["bpb"], ys)
    for exp in exps:
        colour, style = styles[exp.name]
        xs, ys = [p["outer"] for p in exp.heldout_bpb], [p["bpb"] for p in exp.heldout_bpb]
        ax.plot(xs, ys, color=colour, linestyle=style, linewidth=2, marker="s", markersize=5)
        _end_number(ax, exp, xs, ys, colour)
    for value, _, style in refs:
        ax.axhline(value, color="0.35", linestyle=style, linewidth=1.2)


def write_png(path: str | os.PathLike, sweep: dict) -> bytes:
    data = png_bytes(render(sweep))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    return data


# --- helpers ------------------------------------------------------------------

def _columns(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in [head] + rows]


def _num(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def _metric(key: str, v) -> str:
    """Losses to 4 decimals, perplexity to 1, rates (accuracy, match, recall) to 3."""
    if v is None:
        return "-"
    if key in ("loss", "bpb"):
        return f"{v:.4f}"
    return f"{v:.1f}" if key == "perplexity" else f"{v:.3f}"


def _value(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite(v) -> bool:
    return _is_number(v) and math.isfinite(v)
