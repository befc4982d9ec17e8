"""`spark compare`: the picture of a sweep, read through DVC.

Experiments come from `dvc exp show --json` (names, revs, params, the eval.json
metric); each one's training curve comes from its committed outputs: the
`checkpoint.json` that its commit's dvc.lock records, read from the DVC cache.
Nothing is fetched, so it works offline (`dvc exp pull` first for experiments
made elsewhere). One figure, a panel per unit: pairs jobs' training loss per
outer pass (solid) and held-out loss (dashed per pass when the checkpoint logs
`heldout_loss`, else one marker at the last pass from eval.json) in nats per
token; corpus jobs' held-out bits per byte beside zlib-9 and lzma-9e. One legend
under the panels, an entry per experiment named by the params that differ
across the sweep, shortened.
See docs/pipeline.md ("Sweep and compare").
"""
from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Sequence

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from sparktrain.errors import SparkError
from sparktrain.eval.metrics import HEADLINE_KEYS
from sparktrain.eval.plot import DPI, LOG_Y_RATIO, png_bytes
from sparktrain.fsutil import atomic_write_bytes, read_input
from sparktrain.jobfiles import CHECKPOINT, EVAL, job_dir
from sparktrain.params import MAX_OUTER
from sparktrain.repro.lock import cache_dir, cached_blob, outputs
from sparktrain.repro.workspace import tool_env
from sparktrain.safeload import load_json, load_yaml

# values in one experiment's checkpoint.json: 3 a curve point, outer + 1 points at most
CHECKPOINT_ITEMS = 4 * (MAX_OUTER + 1) + 10_000

PARAMS_FILE = "params.yaml"
# A metric with these keys beside the headline ones is the layout from before
# eval_detail.json: the headline numbers are still read from it.
OLD_LAYOUT_KEYS = ("families", "samples", "weights_sha256")


@dataclass
class Experiment:
    name: str
    rev: str
    baseline: str
    params: dict                 # params.yaml, flattened to dotted keys
    metrics: dict                # the headline numbers of its eval.json
    old_layout: bool             # eval.json from before eval_detail.json
    loss_curve: list = field(default_factory=list)   # [{"outer", "loss"}, ...]
    heldout: list = field(default_factory=list)      # [{"outer", "loss"}, ...]
    heldout_bpb: list = field(default_factory=list)  # [{"outer", "bpb"}, ...] (corpus jobs)
    label: str = ""

    @property
    def kind(self) -> str:
        """"corpus" (scored in bits per byte beside the compressors) or "pairs"."""
        return "corpus" if "zlib9_bpb" in self.metrics else "pairs"


# --- reading experiments through DVC ----------------------------------------

def exp_show() -> list:
    """`dvc exp show --json` of the repository in the current folder, parsed."""
    done = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"],
                          env=tool_env(), capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise SparkError(f"`dvc exp show` failed: {lines[-1] if lines else 'no message'}")
    try:
        return load_json(done.stdout, "`dvc exp show --json`")
    except SparkError as err:
        raise SparkError(f"`dvc exp show --json` did not print readable JSON ({err})") from None


def flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


@dataclass(frozen=True)
class Row:
    """One row of `dvc exp show --json`: a baseline commit or an experiment."""
    name: str
    rev: str
    baseline: str
    data: dict


def rows(shown: list) -> tuple[list[Row], list[Row]]:
    """(experiments, baselines) of a `dvc exp show --json` answer, oldest experiment
    first. Queued and failed experiments (no results) are left out."""
    experiments, baselines = [], []
    for base in shown:
        if base.get("rev") == "workspace" or not base.get("data"):
            continue
        base_name = base.get("name") or base["rev"][:7]
        baselines.append(Row(base_name, base["rev"], base_name, base["data"]))
        for exp in base.get("experiments") or []:
            for row in exp.get("revs") or []:
                if row.get("data") and not row.get("error"):
                    experiments.append(Row(row.get("name") or row["rev"][:7], row["rev"],
                                           base_name, row["data"]))
    experiments.sort(key=lambda r: (str(r.data.get("timestamp") or ""), r.name))
    return experiments, baselines


def choose(experiments: list[Row], baselines: list[Row], wanted: Sequence[str]) -> list[Row]:
    """The rows named (an experiment by name or rev prefix, a baseline by its branch
    name), or all experiments when none is named."""
    if not wanted:
        if not experiments:
            raise SparkError("no experiments yet in this workspace; run some with "
                             "`dvc exp run -S step.lr=0.05` (see `dvc exp show`)")
        return experiments
    chosen = []
    for want in wanted:
        found = [r for r in experiments + baselines
                 if r.name == want or (len(want) >= 7 and r.rev.startswith(want))]
        if not found:
            have = ", ".join(r.name for r in experiments) or "none yet"
            raise SparkError(f"no experiment named {want!r} (experiments: {have}); "
                             f"list them with `dvc exp show`")
        if found[0] not in chosen:
            chosen.append(found[0])
    return chosen


def record(row: Row) -> Experiment:
    """An experiment's params and headline numbers; the eval.json from before
    eval_detail.json (every number in one file) is read too."""
    params = flatten(((row.data.get("params") or {}).get(PARAMS_FILE) or {}).get("data") or {})
    metric_path = (job_dir(str(params.get('job'))) / EVAL).as_posix()
    metric = ((row.data.get("metrics") or {}).get(metric_path) or {}).get("data")
    if not isinstance(metric, dict) or not _is_number(metric.get("loss")):
        raise SparkError(f"experiment {row.name}: no held-out loss in {metric_path} "
                         f"(not run, or a layout this version cannot read); "
                         f"re-run it: `dvc exp apply {row.name} && dvc exp run`")
    return Experiment(name=row.name, rev=row.rev, baseline=row.baseline, params=params,
                      metrics={k: metric[k] for k in HEADLINE_KEYS if k in metric},
                      old_layout=any(k in metric for k in OLD_LAYOUT_KEYS))


def read_committed_checkpoint(exp: Experiment) -> dict:
    """An experiment's checkpoint.json as its commit recorded it: the commit's
    dvc.lock names the md5, the DVC cache holds the bytes."""
    path = (job_dir(str(exp.params.get('job'))) / CHECKPOINT).as_posix()
    shown = subprocess.run(["git", "show", f"{exp.rev}:dvc.lock"], capture_output=True,
                           text=True)
    try:
        lock = load_yaml(shown.stdout, "dvc.lock") if shown.returncode == 0 else None
    except SparkError:
        lock = None
    out = outputs(lock if isinstance(lock, dict) else {}).get(path)
    if out is None:
        raise SparkError(f"experiment {exp.name}: its dvc.lock records no {path}")
    blob = cached_blob(out, _dvc_cache())
    if blob is None:
        raise SparkError(f"experiment {exp.name}: its {path} is not in the DVC cache; "
                         f"fetch it with `dvc exp pull <remote> {exp.name}`")
    try:
        # a checkpoint holds outer + 1 points (step.outer is capped): far below this bound
        return load_json(read_input(blob, "checkpoint"), f"experiment {exp.name}: its {path}",
                         max_items=CHECKPOINT_ITEMS)
    except SparkError as err:
        raise SparkError(f"experiment {exp.name}: its {path} is not readable ({err})") from None


@functools.lru_cache(maxsize=1)
def _dvc_cache() -> Path:
    return cache_dir()   # one `dvc cache dir` per run, not one per experiment


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


def changed_params(refs: list[Experiment]) -> list[str]:
    """The params whose values differ among the chosen experiments and their baselines."""
    keys = sorted({k for e in refs for k in e.params})
    return [k for k in keys if len({json.dumps(e.params.get(k)) for e in refs}) > 1]


LABEL_VALUE_CHARS = 18   # a longer value is cut, with "…", in a label


def short_key(key: str, keys: list[str]) -> str:
    """The last part of a dotted key (`step.lr` -> `lr`) unless another key ends so too."""
    last = key.rsplit(".", 1)[-1]
    return last if sum(k.rsplit(".", 1)[-1] == last for k in keys) == 1 else key


def short_value(value) -> str:
    """A value as a label shows it: a path by its file's stem, null as `none`,
    anything long cut to LABEL_VALUE_CHARS."""
    if value is None:
        return "none"
    if isinstance(value, str):
        is_path = "/" in value and not any(c in value for c in "*?[")
        text = PurePosixPath(value).stem if is_path else value
    elif isinstance(value, float):
        text = f"{value:g}"
    else:
        text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= LABEL_VALUE_CHARS else text[:LABEL_VALUE_CHARS - 1] + "…"


def label(exp: Experiment, keys: list[str]) -> str:
    """The params that differ, shortened: `lr=0.05 program=coder`."""
    return " ".join(f"{short_key(k, keys)}={short_value(exp.params.get(k))}"
                    for k in keys) or exp.name


def compare(wanted: Sequence[str], shown: list | None = None,
            read_checkpoint: Callable[[Experiment], dict] = read_committed_checkpoint) -> dict:
    """The sweep as data: the chosen experiments with their curves and labels."""
    experiments, baselines = rows(exp_show() if shown is None else shown)
    chosen = [record(r) for r in choose(experiments, baselines, wanted)]
    for exp in chosen:
        add_curves(exp, read_checkpoint(exp))
    refs = chosen + [_baseline(b) for b in baselines if b.name in {e.baseline for e in chosen}
                     and b.name not in {e.name for e in chosen}]
    keys = changed_params(refs)
    labels = [label(e, keys) for e in chosen]
    for exp, text in zip(chosen, labels):
        # the same params twice (a re-run): the name tells them apart
        exp.label = f"{text} ({exp.name})" if labels.count(text) > 1 else text
    return {"changed_params": keys, "experiments": chosen}


def _baseline(row: Row) -> Experiment:
    """A baseline as a reference for which params changed (its metric may be absent)."""
    params = flatten(((row.data.get("params") or {}).get(PARAMS_FILE) or {}).get("data") or {})
    return Experiment(row.name, row.rev, row.name, params, {}, False)


# --- what it prints and draws ------------------------------------------------

def as_json(sweep: dict) -> dict:
    keys = sweep["changed_params"]
    return {
        "changed_params": keys,
        "experiments": [{
            "name": e.name, "rev": e.rev, "baseline": e.baseline, "label": e.label,
            "params": {k: e.params.get(k) for k in keys}, "metrics": e.metrics,
            "old_layout": e.old_layout, "kind": e.kind, "loss_curve": e.loss_curve,
            "heldout": e.heldout, "heldout_bpb": e.heldout_bpb,
        } for e in sweep["experiments"]],
    }


# Short headers keep the table inside 80 columns for a small grid.
TABLE_HEADS = {"loss": "held-out", "bpb": "bpb", "zlib9_bpb": "zlib9", "lzma9e_bpb": "lzma9e",
               "perplexity": "ppl",
               "next_token_accuracy": "acc", "exact_match": "exact", "copy_recall": "copy"}


def format_table(sweep: dict) -> str:
    keys, exps = sweep["changed_params"], sweep["experiments"]
    metric_keys = [k for k in HEADLINE_KEYS if any(k in e.metrics for e in exps)]
    head = ["experiment", *keys, "train", *(TABLE_HEADS.get(k, k) for k in metric_keys)]
    rows = [[e.name, *(_value(e.params.get(k)) for k in keys), _num(e.loss_curve[-1]["loss"]),
             *(_metric(k, e.metrics.get(k)) for k in metric_keys)] for e in exps]
    lines = [f"{len(exps)} experiment{'s' * (len(exps) != 1)}; params that differ: "
             f"{', '.join(keys) or 'none'}", ""]
    lines += _columns(head, rows)
    key = "train: training loss after the last pass; on the held-out data: " + ", ".join(
        f"{TABLE_HEADS.get(k, k)} = {k}" for k in metric_keys)
    lines += ["", *textwrap.wrap(key, 78)]
    lines += ["", "loss per outer pass: training (held-out)", ""]
    outers = sorted({p["outer"] for e in exps for p in e.loss_curve + e.heldout})
    curve_rows = []
    for outer in outers:
        cells = []
        for e in exps:
            train = next((p["loss"] for p in e.loss_curve if p["outer"] == outer), None)
            held = next((p["loss"] for p in e.heldout if p["outer"] == outer), None)
            cells.append(_num(train) + (f" ({_num(held)})" if held is not None else ""))
        curve_rows.append([_value(outer), *cells])
    lines += _columns(["outer", *(e.name for e in exps)], curve_rows)
    return "\n".join(lines) + "\n"


FIG_WIDTH_IN, BASE_HEIGHT_IN = 8.0, 4.76   # 800 x 500 px with one legend row; each row adds height
LEGEND_ROW_IN = 0.24
LEGEND_CHARS = 100        # characters of legend text one row holds at LEGEND_FONT
LEGEND_FONT = 9
REFERENCES = (("zlib9_bpb", "zlib-9", (0, (5, 3))), ("lzma9e_bpb", "lzma-9e", (0, (1, 2))))


def _legend_layout(labels: list[str]) -> tuple[int, int]:
    """(columns, rows) for the legend under the panels: as many columns as the
    longest label leaves room for."""
    widest = max(len(t) for t in labels) + 6          # + the line sample and the gap
    ncol = max(1, min(len(labels), LEGEND_CHARS // widest))
    return ncol, -(-len(labels) // ncol)


def render(sweep: dict) -> Figure:
    """Pairs jobs (loss in nats per token) and corpus jobs (held-out bits per byte,
    beside zlib-9 and lzma-9e) on panels of their own, one legend under them."""
    exps = sweep["experiments"]
    kinds = [k for k in ("pairs", "corpus") if any(e.kind == k for e in exps)]
    with matplotlib.style.context("default"):
        colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        color = {e.name: colors[i % len(colors)] for i, e in enumerate(exps)}
        handles = [Line2D([], [], color=color[e.name], linewidth=2, label=e.label)
                   for e in exps]
        refs = _references(exps) if "corpus" in kinds else []
        handles += [Line2D([], [], color="0.35", linestyle=style, linewidth=1.2, label=text)
                    for _, text, style in refs]
        texts = [textwrap.shorten(h.get_label(), LEGEND_CHARS - 6, placeholder="…")
                 for h in handles]
        ncol, nrows = _legend_layout(texts)
        height = BASE_HEIGHT_IN + nrows * LEGEND_ROW_IN
        fig = Figure(figsize=(FIG_WIDTH_IN, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        fig.suptitle(f"sweep of {len(exps)} experiment{'s' * (len(exps) != 1)}", fontsize=13)
        axes = fig.subplots(1, len(kinds), squeeze=False)[0]
        for ax, kind in zip(axes, kinds):
            chosen = [e for e in exps if e.kind == kind]
            if kind == "pairs":
                _pairs_panel(ax, chosen, color)
            else:
                _corpus_panel(ax, chosen, color, refs)
        fig.legend(handles, texts, loc="outside lower center", ncol=ncol,
                   fontsize=LEGEND_FONT, frameon=False,
                   title=_legend_title(kinds), title_fontsize=LEGEND_FONT)
    return fig


def _legend_title(kinds: list[str]) -> str:
    parts = []
    if "pairs" in kinds:
        parts.append("pairs: ● training loss  ■ held-out loss")
    if "corpus" in kinds:
        parts.append("corpus: ■ held-out bits per byte")
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


def _pairs_panel(ax, exps: list[Experiment], color: dict) -> None:
    ys = [p["loss"] for e in exps for p in e.loss_curve + e.heldout]
    _style_axes(ax, "pairs jobs", "loss (cross-entropy, nats per token)", ys)
    for exp in exps:
        ax.plot([p["outer"] for p in exp.loss_curve], [p["loss"] for p in exp.loss_curve],
                color=color[exp.name], linewidth=2, marker="o", markersize=4)
        ax.plot([p["outer"] for p in exp.heldout], [p["loss"] for p in exp.heldout],
                color=color[exp.name], linewidth=1.5, linestyle="--", marker="s",
                markersize=6, markeredgecolor="black", markeredgewidth=0.6)


def _references(exps: list[Experiment]) -> list[tuple[float, str, object]]:
    """(bpb, legend text, line style) of each compressor's distinct baseline."""
    found = []
    for key, name, style in REFERENCES:
        for value in sorted({e.metrics[key] for e in exps
                             if e.kind == "corpus" and _is_finite(e.metrics.get(key))}):
            found.append((value, f"{name} ({value:.3f} bpb)", style))
    return found


def _corpus_panel(ax, exps: list[Experiment], color: dict, refs: list) -> None:
    ys = [p["bpb"] for e in exps for p in e.heldout_bpb] + [v for v, _, _ in refs]
    _style_axes(ax, "corpus jobs (held-out text)", "bits per byte", ys)
    for exp in exps:
        ax.plot([p["outer"] for p in exp.heldout_bpb], [p["bpb"] for p in exp.heldout_bpb],
                color=color[exp.name], linewidth=2, marker="s", markersize=5)
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
