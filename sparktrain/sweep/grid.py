"""A sweep's grid: `-S key=v1,v2` arguments expanded as `dvc exp run --queue -S` does
(the cartesian product, the first `-S` varying slowest). A point's name is a hash of
its overrides, so a re-run sweep finds the experiments it already made.

Then the comparison a sweep prints and writes: each point's params, metrics and output hashes
(eval/experiments.py reads them). Only what the inputs decide goes into it (no timings, hosts
or absolute paths): the same sweep gives the same JSON bytes however it was scheduled."""
from __future__ import annotations

import copy
import hashlib
import itertools
import math
import re
from dataclasses import dataclass

from sparktrain.core.errors import SparkError, columns, did_you_mean
from sparktrain.core.safeload import load_yaml
from sparktrain.core.values import is_number
from sparktrain.params import parse_params
from sparktrain.eval.experiments import Experiments, read_record
from sparktrain.repro.dvclock import LOCK, outputs

MAX_POINTS = 10_000  # a grid larger than this is a typo, not a sweep
KEY = re.compile(r"^(\+?)([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)=(.+)$")


@dataclass(frozen=True)
class Axis:
    key: str               # dotted params.yaml key, e.g. "step.lr"
    values: tuple          # the values as written, e.g. ("0.02", "0.05")
    add: bool = False      # `+key=`: a key params.yaml lacks


@dataclass(frozen=True)
class Point:
    name: str                          # the experiment name, e.g. "sweep-3f2a9c01d4"
    overrides: tuple[str, ...]         # `-S` arguments of one `dvc exp run`, e.g. ("step.lr=0.02",)
    values: tuple[tuple[str, str], ...]  # ((key, value as written), ...)
    error: str | None = None           # params.yaml with these values does not validate


def parse_axis(text: str) -> Axis:
    match = KEY.match(text)
    if not match:
        raise SparkError(f"-S expects KEY=VALUE[,VALUE...] (e.g. step.lr=0.02,0.05), "
                         f"got {text!r}")
    add, key, values = match.groups()
    if values.count(",") >= MAX_POINTS:
        raise SparkError(f"-S {key}: more than {MAX_POINTS:,} values")
    parts = tuple(v.strip() for v in values.split(","))
    if any(not v for v in parts):
        raise SparkError(f"-S {text!r}: an empty value in the list")
    return Axis(key, parts, bool(add))


def point_name(values) -> str:
    """Same overrides, same name: `sweep-` and 10 hex digits of their sha256."""
    text = "\n".join(f"{k}={v}" for k, v in sorted(values))
    return "sweep-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def expand(axes: list[Axis], params: dict) -> list[Point]:
    """The grid's points in order, each checked against `params` (params.yaml as loaded)."""
    if not axes:
        raise SparkError("nothing to sweep: give at least one -S KEY=VALUE[,VALUE...]")
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise SparkError(f"-S {dup} is given twice; put all its values in one list")
    size = math.prod(len(a.values) for a in axes)
    if size > MAX_POINTS:
        raise SparkError(f"the grid has {size:,} points, above the limit of {MAX_POINTS:,}; "
                         f"sweep fewer values per -S")
    for axis in axes:
        check_key(params, axis)
    points = []
    for combo in itertools.product(*(a.values for a in axes)):
        values = tuple(zip(keys, combo))
        overrides = tuple(("+" if a.add else "") + f"{a.key}={v}" for a, v in zip(axes, combo))
        points.append(Point(point_name(values), overrides, values,
                            invalid(params, axes, combo)))
    return points


def check_key(params: dict, axis: Axis) -> None:
    """An unknown key is a mistake of the whole sweep (exit 2), like `dvc exp run -S`;
    a near miss of a key params.yaml has is named."""
    node, path = params, []
    for part in axis.key.split("."):
        if not isinstance(node, dict) or part not in node:
            if axis.add and isinstance(node, dict):
                return
            hint = f" (use +{axis.key}=... to add it)" if not axis.add else ""
            near = did_you_mean(part, node) if isinstance(node, dict) else ""
            near = near.replace("'", f"'{'.'.join(path)}.", 1) if near and path else near
            raise SparkError(f"-S {axis.key}: params.yaml has no key {axis.key}{near}{hint}")
        node = node[part]
        path.append(part)
    if axis.add:
        raise SparkError(f"-S +{axis.key}: params.yaml already has {axis.key}; drop the +")


def invalid(params: dict, axes: list[Axis], combo) -> str | None:
    """The one-line params error of this point, or None when it validates."""
    doc = copy.deepcopy(params)
    for axis, text in zip(axes, combo):
        node = doc
        *parents, leaf = axis.key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        try:
            node[leaf] = load_yaml(text, f"-S {axis.key}")
        except SparkError:
            node[leaf] = text
    try:
        parse_params(doc)
    except SparkError as err:
        return str(err)
    return None


WEIGHTS_SUFFIX = ".safetensors"  # the output the table shows a hash of


def experiments_of(source: Experiments, baseline: str) -> dict[str, dict]:
    """name -> {rev, params, metrics, outputs} of the experiments run on `baseline`:
    params.yaml, eval.json and path -> md5 of every output in dvc.lock, at each rev."""
    found = {}
    for row in source.rows(baseline)[0]:
        rec = read_record(source, row)
        entry = {"data": rec.metrics} if rec.metrics is not None \
            else {"error": {"msg": rec.metrics_error}}
        lock = source.read(LOCK, row.rev)
        found[row.name] = {"rev": row.rev, "params": rec.params,
                           "metrics": {rec.metrics_path: entry},
                           "outputs": lock_outputs(lock) if lock is not None else {}}
    return found


def lock_outputs(lock_text: str | bytes) -> dict[str, str]:
    """path -> md5 of every output in a dvc.lock (outs, metrics and plots alike; "" unrecorded)."""
    return {path: out.md5 or "" for path, out in outputs(load_yaml(lock_text, LOCK)).items()}


def _lookup(tree, dotted: str):
    for part in dotted.lstrip("+").split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def point_record(point: Point, exp: dict | None, outputs: dict, failure: str | None) -> dict:
    params_doc = (exp or {}).get("params") or {}
    params = {key: _lookup(params_doc, key) if exp else _as_written(value)
              for key, value in point.values}
    metrics, errors = {}, []
    for path, entry in sorted(((exp or {}).get("metrics") or {}).items()):
        if "data" in entry:
            metrics[path] = entry["data"]
        else:
            errors.append(f"{path}: {entry.get('error', {}).get('msg', 'unreadable')}")
    if exp is None and failure is None:
        failure = "the experiment was not found after `dvc exp pull`"
    return {"name": point.name, "overrides": list(point.overrides), "params": params,
            "state": "failed" if failure else "done", "error": failure,
            "metrics": metrics, "metric_errors": errors, "outputs": dict(sorted(outputs.items())),
            "rev": exp["rev"] if exp else None}


def _as_written(text: str):
    """A value as `dvc exp run -S` would set it: YAML, with `1e30` a float as DVC reads it."""
    try:
        value = load_yaml(text, "-S value")
    except SparkError:
        return text
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def headline(metrics: dict) -> dict[str, float]:
    """The scalar numbers at the top of each metrics file, as `dvc exp show` would list them."""
    flat = {}
    for data in metrics.values():
        for key, value in data.items():
            if is_number(value):
                flat.setdefault(key, value)
    return flat


def sweep_table(doc: dict, tty: bool | None = None) -> str:
    """A `dvc exp show`-like table (errors.columns, `tty` as its): the swept params, the
    headline metrics, the weights' hash (8 hex digits) when it differs between points."""
    points = doc["points"]
    keys = [k for k, _ in (doc["axes"] or [])]
    metric_keys = list(dict.fromkeys(k for p in points for k in headline(p["metrics"])))
    out_paths = sorted({path for p in points for path in p["outputs"]})
    changed = [path for path in out_paths if path.endswith(WEIGHTS_SUFFIX)
               and len({p["outputs"].get(path) for p in points if p["state"] == "done"}) > 1]
    header = ["Experiment", "State", *keys, *metric_keys, *(p.rsplit("/", 1)[-1] for p in changed)]
    rows = [[p["name"], p["state"], *(_cell(p["params"].get(k)) for k in keys),
             *(_cell(headline(p["metrics"]).get(k)) for k in metric_keys),
             *((p["outputs"].get(path) or "-")[:8] for path in changed)] for p in points]
    lines = columns(header, rows, rule=True, tty=tty)
    lines += [f"{p['name']} failed: {p['error']}" for p in points if p["error"]]
    return "\n".join(lines)


def _cell(value) -> str:
    return "-" if value is None else f"{value:.5g}" if isinstance(value, float) else str(value)
