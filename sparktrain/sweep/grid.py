"""A sweep's grid: `-S key=v1,v2` arguments expanded as `dvc exp run --queue -S` does
(the cartesian product, the first `-S` varying slowest). A point's name is a hash of
its overrides, so a re-run sweep finds the experiments it already made."""
from __future__ import annotations

import copy
import hashlib
import itertools
import math
import re
from dataclasses import dataclass

from sparktrain.core.errors import SparkError
from sparktrain.params import parse_params
from sparktrain.core.safeload import load_yaml

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
        _check_key(params, axis)
    points = []
    for combo in itertools.product(*(a.values for a in axes)):
        values = tuple(zip(keys, combo))
        overrides = tuple(("+" if a.add else "") + f"{a.key}={v}" for a, v in zip(axes, combo))
        points.append(Point(point_name(values), overrides, values,
                            _invalid(params, axes, combo)))
    return points


def _check_key(params: dict, axis: Axis) -> None:
    """An unknown key is a mistake of the whole sweep (exit 2), like `dvc exp run -S`."""
    node = params
    for part in axis.key.split("."):
        if not isinstance(node, dict) or part not in node:
            if axis.add and isinstance(node, dict):
                return
            hint = f" (use +{axis.key}=... to add it)" if not axis.add else ""
            raise SparkError(f"-S {axis.key}: params.yaml has no key {axis.key}{hint}")
        node = node[part]
    if axis.add:
        raise SparkError(f"-S +{axis.key}: params.yaml already has {axis.key}; drop the +")


def _invalid(params: dict, axes: list[Axis], combo) -> str | None:
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
