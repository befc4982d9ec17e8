"""`spark compare`, reading: the chosen experiments (through sparktrain/eval/experiments.py),
their curves and labels; a headline number not finite is one line naming it. Then the text
(runs, metrics, curves in 80 columns, laid out by errors.columns, the one column printer);
eval/plot.py draws them. See docs/pipeline.md ("Sweep and
compare")."""
from __future__ import annotations

import dataclasses
import json
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Sequence

from sparktrain.core import compat
from sparktrain.core.errors import SparkError, columns
from sparktrain.core.jobfiles import CHECKPOINT
from sparktrain.core.safeload import load_yaml
from sparktrain.core.values import is_finite, is_number
from sparktrain.core.metric_keys import HEADLINE_KEYS, SHORT_HEADS
from sparktrain.params import MAX_OUTER, Defaults
from sparktrain.eval.experiments import (DvcExperiments, Experiments, ExpRecord, ExpRow,
                                         read_json_at, read_params, read_record)

# values in one experiment's checkpoint.json: 3 a curve point, outer + 1 points at most
CHECKPOINT_ITEMS = 4 * (MAX_OUTER + 1) + 10_000


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
    source: ExpRecord | None = None  # what the reader read (None: a baseline reference)

    @property
    def unit(self) -> str:
        """What its held-out record measured: "bpb" (bits per byte) or "loss" (nats)."""
        return "bpb" if is_finite(self.metrics.get("bpb")) else "loss"


# --- reading experiments through DVC ----------------------------------------

def flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def resolved_params(raw) -> dict:
    """params.yaml flattened, an unset (or null) knob as its default (docs/pipeline.md)."""
    flat = flatten(raw if isinstance(raw, dict) else {})
    for key, value in flatten(dataclasses.asdict(Defaults())).items():
        nested = any(k.startswith(f"{key}.") for k in flat)
        if flat.get(key) is None and value is not None and not nested:
            flat[key] = value
    return flat


def named(row: ExpRow, want: str) -> bool:
    """Whether `want` names the row: its name, or a prefix (7+ characters) of its commit."""
    return row.name == want or (len(want) >= 7 and len(row.rev) >= 7
                                and (row.rev.startswith(want) or want.startswith(row.rev)))


def with_earlier_commits(source: Experiments, wanted: Sequence[str]):
    """HEAD's experiments and baseline, plus those of each earlier commit that ran a
    wanted experiment not found on HEAD (`dvc exp list --all-commits` lists them too)."""
    experiments, baselines = source.rows()
    for want in wanted:
        if any(named(r, want) for r in experiments + baselines):
            continue
        base = source.baseline_of(want)
        if base is not None and not any(b.rev == base for b in baselines):
            more, more_bases = source.rows(base[:7])
            experiments, baselines = experiments + more, baselines + more_bases
    return experiments, baselines


def choose(experiments: list[ExpRow], baselines: list[ExpRow],
           wanted: Sequence[str]) -> list[ExpRow]:
    """The rows named (by name, rev prefix or baseline branch), else all experiments."""
    if not wanted:
        if not experiments:
            raise SparkError("no experiments yet in this workspace; run some with "
                             "`dvc exp run -S step.lr=0.05` (see `dvc exp show`)")
        return list(experiments)
    chosen = []
    for want in wanted:
        found = [r for r in experiments + baselines if named(r, want)]
        if not found:
            have = ", ".join(r.name for r in experiments) or "none yet"
            raise SparkError(f"no experiment named {want!r} (experiments: {have}); "
                             f"list them with `dvc exp show`")
        if found[0] not in chosen:
            chosen.append(found[0])
    return chosen


def record(row: ExpRow, source: Experiments) -> Experiment:
    """An experiment's params and headline numbers (a pre-split eval.json too)."""
    rec = read_record(source, row)
    metric = rec.metrics
    if not isinstance(metric, dict) or not is_number(metric.get("loss")):
        if rec.metrics_error and rec.metrics_error != "not in the experiment":
            raise SparkError(f"experiment {row.name}: {rec.metrics_error}")
        raise SparkError(f"experiment {row.name}: no held-out loss in {rec.metrics_path} "
                         f"(not run, or a layout this version cannot read); "
                         f"re-run it: `dvc exp apply {row.name} && dvc exp run`")
    bad = next((k for k in HEADLINE_KEYS if k in metric and not is_finite(metric[k])), None)
    if bad:  # 1e400 reads as inf: neither a table cell nor JSON could say it
        raise SparkError(f"experiment {row.name}: {rec.metrics_path}'s {bad} is "
                         f"{str(metric[bad])[:40]!r}, not a finite number; re-run it")
    return Experiment(name=row.name, rev=row.rev, baseline=row.baseline,
                      params=resolved_params(rec.params),
                      metrics={k: metric[k] for k in HEADLINE_KEYS if k in metric},
                      old_layout=compat.is_pre_split_eval(metric), source=rec)


def read_checkpoint(exp: Experiment, source: Experiments) -> dict:
    """An experiment's checkpoint.json as its commit recorded it (from the DVC cache)."""
    path = exp.source.job_file(CHECKPOINT)
    try:
        # a checkpoint holds outer + 1 points (step.outer is capped): far below this bound
        ckpt = read_json_at(source, path, exp.rev, max_items=CHECKPOINT_ITEMS)
    except SparkError as err:
        raise SparkError(f"experiment {exp.name}: its {path} is not readable ({err})") from None
    if ckpt is None:
        raise SparkError(f"experiment {exp.name}: its {path} is not in the DVC cache; "
                         f"fetch it with `dvc exp pull <remote> {exp.name}`")
    return ckpt


def add_curves(exp: Experiment, ckpt: dict) -> None:
    """Training curve and held-out per pass from the checkpoint, else eval's at the last pass."""
    curve = ckpt.get("loss_curve") if isinstance(ckpt, dict) else None
    if not isinstance(curve, list) or not curve:
        raise SparkError(f"experiment {exp.name}: its checkpoint.json has no loss_curve")
    for i, item in enumerate(curve):
        outer = item.get("outer", i) if isinstance(item, dict) else None
        if not (is_finite(outer) and is_finite(item.get("loss"))):
            raise SparkError(f"experiment {exp.name}: loss_curve[{i}] is not "
                             f"{{outer, loss}} with finite numbers")
        exp.loss_curve.append({"outer": outer, "loss": item["loss"]})
        for held, key in ((exp.heldout, "loss"), (exp.heldout_bpb, "bpb")):
            if is_finite(item.get(f"heldout_{key}")):
                held.append({"outer": outer, key: item[f"heldout_{key}"]})
    for held, key in ((exp.heldout, "loss"), (exp.heldout_bpb, "bpb")):
        if not held and is_finite(exp.metrics.get(key)):
            held.append({"outer": exp.loss_curve[-1]["outer"], key: exp.metrics[key]})


def _differ(exps: list[Experiment], keys: list[str]) -> list[str]:
    return [k for k in keys if len({json.dumps(e.params.get(k)) for e in exps}) > 1]


def changed_params(chosen: list[Experiment], baselines: list[Experiment]) -> tuple[list[str], dict]:
    """(params differing among the chosen, {param: value} they share unlike their baseline)."""
    keys = sorted({k for e in chosen + baselines for k in e.params})
    if len(chosen) < 2:
        return _differ(chosen + baselines, keys), {}
    differ = _differ(chosen, keys)
    shared = {k: chosen[0].params.get(k) for k in _differ(chosen + baselines, keys)
              if k not in differ}
    return differ, shared


def within_jobs(exps: list[Experiment], keys: list[str]) -> list[str]:
    """Of the params that differ, those a reader compares: with runs of several jobs, `job`
    and the params that differ between runs of the same job (a coder run beside the pairs
    grid differs in some twenty knobs; naming them all buried the grid's lr and seed)."""
    jobs: dict = {}
    for exp in exps:
        jobs.setdefault(json.dumps(exp.params.get("job")), []).append(exp)
    if len(jobs) < 2:
        return keys
    return ["job", *(k for k in keys if k != "job" and any(_differ(group, [k])
                                                          for group in jobs.values()))]


def where_filter(specs: Sequence[str]):
    """`--where KEY=VALUE` specs as a predicate on an Experiment (docs/pipeline.md)."""
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

    def keep(exp: Experiment) -> bool:  # every test met by a key named so or ending so
        return all(any(v == value or short_value(v) == text for k, v in exp.params.items()
                       if k == key or k.rsplit(".", 1)[-1] == key) for key, text, value in tests)
    return keep


def compare(wanted: Sequence[str] = (), source: Experiments | None = None, *,
            where: Sequence[str] = (), last: int | None = None, every_param: bool = False) -> dict:
    """The sweep as data: the chosen experiments, filtered, with curves and labels; the
    params that differ within each job (`every_param`: all that differ)."""
    keep = where_filter(where)
    if last is not None and last < 1:
        raise SparkError(f"--last must be >= 1, got {last}")
    if source is None:
        with DvcExperiments() as dvc_source:
            return compare(wanted, dvc_source, where=where, last=last, every_param=every_param)
    experiments, baselines = with_earlier_commits(source, wanted)
    chosen = [record(r, source) for r in choose(experiments, baselines, wanted)]
    chosen = [e for e in chosen if keep(e)]
    if not chosen:
        raise SparkError(f"no experiment has {' '.join(where)} (see `dvc exp show`)")
    chosen = chosen[-last:] if last else chosen
    for exp in chosen:
        add_curves(exp, read_checkpoint(exp, source))
    names = {e.name for e in chosen}
    # the baselines as references for which params changed (their metrics may be absent)
    refs = [Experiment(b.name, b.rev, b.name, resolved_params(read_params(source, b.rev)), {},
                       False) for b in baselines
            if b.name in {e.baseline for e in chosen} and b.name not in names]
    keys, shared = changed_params(chosen, refs)
    if not every_param:
        keys = within_jobs(chosen + refs, keys)
        shared = {k: v for k, v in shared.items() if k in within_jobs(chosen + refs, list(shared))}
    labels = label_texts(chosen, keys)
    for number, (exp, text) in enumerate(zip(chosen, labels), 1):
        exp.number = number
        # the same params twice (a re-run): the name tells them apart
        exp.label = f"{text} ({exp.name})" if labels.count(text) > 1 else text
    return {"changed_params": keys, "shared_params": shared, "experiments": chosen}


LABEL_VALUE_CHARS = 18   # a longer value shows only what sets it apart from the others


def short_key(key: str, keys: list[str]) -> str:
    """The last part of a dotted key (`step.lr` -> `lr`) unless another key ends so too."""
    last = key.rsplit(".", 1)[-1]
    return last if sum(k.rsplit(".", 1)[-1] == last for k in keys) == 1 else key


def short_value(value) -> str:
    """A value as a label shows it: a path's stem, null as `none`, a float shortest."""
    if value is None:
        return "none"
    if isinstance(value, str):
        is_path = "/" in value and not any(c in value for c in "*?[")
        return PurePosixPath(value).stem if is_path else value
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value, separators=(",", ":"))


def short_values(values: list) -> list[str]:
    """One param's values across runs, a long one cut to its distinct part (shared: `…`)."""
    texts = [short_value(v) for v in values]
    if max((len(t) for t in texts), default=0) <= LABEL_VALUE_CHARS or len(set(texts)) < 2:
        return [t if len(t) <= LABEL_VALUE_CHARS else t[:LABEL_VALUE_CHARS - 1] + "…"
                for t in texts]
    prefix = len(os.path.commonprefix(texts))
    suffix = len(os.path.commonprefix([t[prefix:][::-1] for t in texts]))
    start, cut = max(0, prefix - 3), max(0, suffix - 3)  # 3 shared characters kept, for context
    return [t if len(t) <= LABEL_VALUE_CHARS else
            ("…" if start else "") + t[start:len(t) - cut] + ("…" if cut else "") for t in texts]


def label_texts(exps: list[Experiment], keys: list[str]) -> list[str]:
    """Each run's params that differ, shortened: `lr=0.05 program=…der-1`."""
    columns = [short_values([e.params.get(k) for e in exps]) for k in keys]
    return [" ".join(f"{short_key(k, keys)}={col[i]}" for k, col in zip(keys, columns))
            or exps[i].name for i in range(len(exps))]


def as_json(sweep: dict) -> dict:
    keys = sweep["changed_params"]
    return {"changed_params": keys, "shared_params": sweep.get("shared_params", {}),
            "experiments": [{
                "number": e.number, "name": e.name, "rev": e.rev, "baseline": e.baseline,
                "label": e.label, "params": {k: e.params.get(k) for k in keys},
                "metrics": e.metrics, "old_layout": e.old_layout, "unit": e.unit,
                "loss_curve": e.loss_curve, "heldout": e.heldout, "heldout_bpb": e.heldout_bpb,
            } for e in sweep["experiments"]]}


WIDTH = 80   # the terminal the table is laid out for


def compare_table(sweep: dict, tty: bool | None = None) -> str:
    """The runs, numbered as in the legend: one table within WIDTH, else a key of
    params and the metrics table beside the numbers; then the curves, a row per run."""
    keys, exps = sweep["changed_params"], sweep["experiments"]
    shared = sweep.get("shared_params") or {}
    metric_keys = [k for k in HEADLINE_KEYS if any(k in e.metrics for e in exps)]
    metric_head = ["train", *(SHORT_HEADS.get(k, k) for k in metric_keys)]
    metric_cells = [[metric_text("loss", e.loss_curve[-1]["loss"]),
                     *(metric_text(k, e.metrics.get(k)) for k in metric_keys)] for e in exps]
    short = [short_values([e.params.get(k) for e in exps]) for k in keys]
    names = [f"{e.number:>{len(str(len(exps)))}} {e.name}" for e in exps]  # "1 swept-hulk"
    lines = textwrap.wrap(f"{len(exps)} experiment{'s' * (len(exps) != 1)}; params that "
                          f"differ: {', '.join(keys) or 'none'}", WIDTH - 2)
    if shared:
        lines += textwrap.wrap("the same in all, not in the baseline: " + " ".join(
            f"{k}={short_value(v)}" for k, v in shared.items()), WIDTH - 2)
    lines.append("")
    table = columns(["experiment", *(short_key(k, keys) for k in keys), *metric_head],
                   [[n, *(col[i] for col in short), *m]
                    for i, (n, m) in enumerate(zip(names, metric_cells))], tty=tty)
    if max(len(ln) for ln in table) > WIDTH:
        runs = columns(["experiment", *(short_key(k, keys) for k in keys)],
                      [[n, *(col[i] for col in short)] for i, n in enumerate(names)], tty=tty)
        if max(len(ln) for ln in runs) > WIDTH:    # a key: each run's params, wrapped
            w = max(len(n) for n in names) + 2
            runs = [ln for name, text in zip(names, label_texts(exps, keys))
                    for ln in textwrap.wrap(text, WIDTH, initial_indent=name.ljust(w),
                                            subsequent_indent=" " * w,
                                            break_on_hyphens=False)]
        lines += [*runs, ""]
        table = columns(["experiment", *metric_head],
                       [[n, *m] for n, m in zip(names, metric_cells)], tty=tty)
        if max(len(ln) for ln in table) > WIDTH:
            table = columns(["#", *metric_head],
                           [[str(e.number), *m] for e, m in zip(exps, metric_cells)], tty=tty)
    lines += table
    key = "train: training loss after the last pass; on the held-out data: " + ", ".join(
        f"{SHORT_HEADS.get(k, k)} = {k}" for k in metric_keys)
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
    cells = {(e.number, p["outer"]): metric_text(key, p[key]) for e in exps for p in curve(e)}
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
            *columns(["run", *(json.dumps(o) for o in shown)], rows, tty=tty)]  # finite numbers


def metric_text(key: str, v) -> str:
    """Losses to 4 decimals, perplexity to 1, rates (accuracy, match, recall) to 3."""
    digits = 4 if key in ("loss", "bpb") else 1 if key == "perplexity" else 3
    return "-" if v is None else f"{v:.{digits}f}"
