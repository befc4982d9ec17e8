"""pydantic's validation errors as params.yaml's one-line messages, naming the dotted key,
what it must be and what it got (docs/pipeline.md "Hostile inputs")."""
from __future__ import annotations

from pydantic import ValidationError

from sparktrain.core.errors import did_you_mean

TYPE_ERRORS = {"int_type": "int", "int_parsing": "int", "int_from_float": "int",
               "bool_type": "bool", "string_type": "str", "dict_type": "a mapping",
               "dataclass_type": "a mapping", "dataclass_args_type": "a mapping"}
# keys earlier releases read, and what took their place (a params file written for them)
RENAMED = {"eval.adapt_lr": "eval.dynamic_lr (the adaptive score became dynamic evaluation, "
                            "docs/training.md \"Dynamic evaluation\")",
           "eval.adapt_batch": "nothing: dynamic evaluation updates after each piece "
                               "(eval.dynamic_stride tokens)"}
BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
          "less_than_equal": "<="}


def one_line(err: ValidationError, known_keys, section: str = "") -> str:
    """pydantic's first error as `params: <dotted key> <what is wrong>`; known_keys(parts):
    the keys the schema allows beside the last of a dotted key's pieces."""
    e = err.errors()[0]
    parts = ((section,) if section else ()) + tuple(e["loc"])
    key = ".".join(str(part) for part in parts)
    kind, got = e["type"], e.get("input")
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        if key in RENAMED:
            return f"params: {key} is no longer read; use {RENAMED[key]}"
        return f"params: unknown key {key}{did_you_mean(parts[-1], known_keys(parts))}"
    if kind in ("missing_argument", "missing"):
        return f"params: missing key {key}"
    if kind == "literal_error" or kind in TYPE_ERRORS:
        want = f"one of {e['ctx']['expected']}" if kind == "literal_error" else TYPE_ERRORS[kind]
        return f"params: {key} must be {want}, got {type(got).__name__} {got!r}"
    if kind in BOUNDS:
        return f"params: {key} must be {BOUNDS[kind]} {next(iter(e['ctx'].values()))}, got {got!r}"
    msg = str(e["msg"]).removeprefix("Value error, ")
    return f"params: {key} {msg}" if msg.startswith("must") else f"params: {key}: {msg}"
