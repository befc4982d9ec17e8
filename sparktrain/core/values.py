"""What a value read from a JSON or YAML file is: a number (an int or a float, never a
bool, which Python counts as an int), a finite one. The one spelling of these checks: every
reader of eval.json, checkpoint.json, params.yaml or a sweep's metrics imports it."""
from __future__ import annotations

import math


def is_number(v) -> bool:
    """A JSON number: an int or a float, never a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_finite(v) -> bool:
    """A JSON number that is neither NaN nor an infinity."""
    return is_number(v) and math.isfinite(v)


def number(v):
    """`v` when it is a finite number, else None (a record's optional number)."""
    return v if is_finite(v) else None
