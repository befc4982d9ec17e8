"""The Spark-coder recipes: one row per scale of data/programs/coder-recipes.yaml, each row
a whole params file validated like params.yaml (`spark code train --scale S`;
docs/compat.md), and a params mapping as the `dvc exp run -S` flags that run it through
the pipeline (`--dvc-command`)."""
from __future__ import annotations

from pathlib import Path

from sparktrain.core.errors import SparkError, did_you_mean
from sparktrain.core.fsutil import read_input
from sparktrain.core.safeload import load_yaml
from sparktrain.params import Params, parse_params

RECIPES_FILE = "data/programs/coder-recipes.yaml"


def recipes_file() -> Path:
    """The recipe table: the one in the working folder (a clone of the project), else the
    checkout's own beside this package, so `spark train --dataset TEXT` run in a folder of
    the user's finds its defaults."""
    here, shipped = Path(RECIPES_FILE), Path(__file__).resolve().parents[2] / RECIPES_FILE
    return shipped if not here.exists() and shipped.is_file() else here


def load_recipe(scale: str, path: str | Path | None = None) -> Params:
    """The row `scale` of the recipe table: a params file of its own, validated like
    params.yaml; an unknown row is one line naming the known ones."""
    path = Path(path) if path is not None else recipes_file()
    row = recipe_row(scale, path)
    try:
        return parse_params(row)
    except SparkError as err:
        raise SparkError(f"{path} row {scale}: {err}") from None


def recipe_row(scale: str, path: str | Path | None = None) -> dict:
    """The raw mapping of row `scale` of the recipe table (load_recipe validates it)."""
    path = Path(path) if path is not None else recipes_file()
    table = load_yaml(read_input(path, "recipe table"), str(path))
    if not isinstance(table, dict) or not all(isinstance(r, dict) for r in table.values()):
        raise SparkError(f"{path}: expected a mapping of scale names to params")
    if scale not in table:
        raise SparkError(f"no coder recipe for scale {scale!r} in {path}; known: "
                         f"{', '.join(table)} (or give a params file with --params)"
                         f"{did_you_mean(scale, table)}")
    return table[scale]


def dvc_set_flags(raw: dict, prefix: str = "") -> list[str]:
    """A params mapping as `dvc exp run` overrides: one `-S ++key=value` per leaf
    (`++`: set the key whether or not params.yaml has it), values in the override
    grammar (strings quoted, lists in brackets), so the pipeline runs that params file."""
    flags = []
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flags += dvc_set_flags(value, name + ".")
        else:
            flags += ["-S", f"++{name}={_override_value(value)}"]
    return flags


def _override_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    raise SparkError(f"params: cannot pass {type(value).__name__} {value!r} to dvc exp run -S")
