"""`spark tune`'s search space: `-S key=log:a..b` (a float drawn on a log scale),
`key=int:a..b` (an integer), `key=a..b` (a float), `key=x,y,z` (one of these values,
as written). Each key is checked against params.yaml as `spark sweep` checks its axes;
every mistake is one line. The space's text form (`signature`) is what a study stores,
so a study name that already holds another space is refused."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from sparktrain.core.errors import SparkError
from sparktrain.core.safeload import load_json
from sparktrain.core.values import is_number
from sparktrain.sweep.grid import KEY, Axis, check_key

RANGE = re.compile(r"^(?:(log|int):)?([^,]*)\.\.([^,]*)$")


@dataclass(frozen=True)
class Dimension:
    key: str                    # dotted params.yaml key, e.g. "step.lr"
    kind: str                   # "log", "int", "float" or "choice"
    low: float | int | None = None
    high: float | int | None = None
    choices: tuple[str, ...] = ()   # the values as written (kind "choice")
    add: bool = False           # `+key=`: a key params.yaml lacks

    def override(self, value) -> str:
        """The `dvc exp run -S` argument that sets `value` (a float in full: repr)."""
        written = repr(value) if isinstance(value, float) else str(value)
        return ("+" if self.add else "") + f"{self.key}={written}"


def parse_dimension(text: str) -> Dimension:
    match = KEY.match(text)
    if not match:
        raise SparkError(f"-S expects KEY=RANGE or KEY=V1,V2,... (e.g. step.lr=log:0.001..0.1), "
                         f"got {text!r}")
    add, key, spec = match.groups()
    ranged = RANGE.match(spec.strip())
    if ranged is None:
        if spec.startswith(("log:", "int:")):
            raise SparkError(f"-S {key}: {spec.split(':')[0]}: takes a range LOW..HIGH, "
                             f"got {spec!r}")
        choices = tuple(v.strip() for v in spec.split(","))
        if any(not v for v in choices):
            raise SparkError(f"-S {text!r}: an empty value in the list")
        if len(set(choices)) != len(choices):
            raise SparkError(f"-S {key}: a value is listed twice in {spec!r}")
        return Dimension(key, "choice", choices=choices, add=bool(add))
    kind, low_text, high_text = ranged.groups()
    kind = kind or "float"
    low, high = (_number(key, kind, t) for t in (low_text, high_text))
    if not low < high:
        raise SparkError(f"-S {key}: the range {low_text}..{high_text} is "
                         f"{'empty' if low == high else 'inverted'}; write LOW..HIGH with "
                         f"LOW < HIGH")
    if kind == "log" and low <= 0:
        raise SparkError(f"-S {key}: log: needs LOW > 0, got {low_text}")
    return Dimension(key, kind, low, high, add=bool(add))


def _number(key: str, kind: str, text: str):
    text = text.strip()
    try:
        value = int(text) if kind == "int" else float(text)
    except ValueError:
        what = "an integer" if kind == "int" else "a number"
        raise SparkError(f"-S {key}: {text!r} is not {what} ({kind} range)") from None
    if not math.isfinite(value):
        raise SparkError(f"-S {key}: {text!r} is not a finite number")
    return value


def parse_space(specs: list[str], params: dict) -> tuple[Dimension, ...]:
    """The dimensions of `-S` specs, each key checked against `params` (params.yaml)."""
    if not specs:
        raise SparkError("nothing to tune: give at least one -S KEY=RANGE or KEY=V1,V2,... "
                         "(e.g. -S 'step.lr=log:0.001..0.1')")
    dims = tuple(parse_dimension(s) for s in specs)
    keys = [d.key for d in dims]
    for key in keys:
        if keys.count(key) > 1:
            raise SparkError(f"-S {key} is given twice; one range or list per key")
    for dim in dims:
        check_key(params, Axis(dim.key, (), dim.add))
    return dims


def distributions(dims) -> dict:
    """Optuna's distribution of each dimension, by key."""
    from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                      IntDistribution)

    def one(d: Dimension):
        if d.kind == "choice":
            return CategoricalDistribution(d.choices)
        if d.kind == "int":
            return IntDistribution(d.low, d.high)
        return FloatDistribution(d.low, d.high, log=d.kind == "log")
    return {d.key: one(d) for d in dims}


def signature(dims) -> str:
    """The space as one canonical line: what a study remembers of its -S arguments."""
    return json.dumps([[d.key, d.kind, d.low, d.high, list(d.choices), d.add] for d in dims],
                      separators=(",", ":"))


def describe(text) -> str:
    """A stored signature as the -S arguments that made it; one line when the study's
    space was written or edited by another tool (not the rows `signature` writes)."""
    try:
        rows = load_json(text, "the study's search space") if isinstance(text, str) else text
    except SparkError as err:
        raise _foreign(str(err)) from None
    if not isinstance(rows, list) or not rows:
        raise _foreign(f"not a list of -S rows: {_short(rows)}")
    parts = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 6 and isinstance(row[0], str)
                and row[1] in KINDS and isinstance(row[4], list) and isinstance(row[5], bool)):
            raise _foreign(f"a row is not [key, kind, low, high, choices, add]: {_short(row)}")
        key, kind, low, high, choices, add = row
        if kind == "choice" and not all(isinstance(c, str) for c in choices):
            raise _foreign(f"a choice of {key!r} is not text: {_short(choices)}")
        if kind != "choice" and not all(is_number(v) for v in (low, high)):
            raise _foreign(f"the range of {key!r} is not two numbers: {_short([low, high])}")
        spec = ",".join(choices) if kind == "choice" else \
            f"{'' if kind == 'float' else kind + ':'}{low}..{high}"
        parts.append(f"-S {'+' if add else ''}{key}={spec}")
    return " ".join(parts)


KINDS = ("log", "int", "float", "choice")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _foreign(why: str) -> SparkError:
    return SparkError(f"the study's stored search space is not one spark tune wrote ({why}); "
                      f"give another --study, or delete this one (optuna delete-study)")
