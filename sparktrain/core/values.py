"""What a value read from a JSON or YAML file is: a number (an int or a float, never a
bool, which Python counts as an int), a finite one, a count, an integer. The one spelling
of these checks: every reader of eval.json, checkpoint.json, resume.json, params.yaml, an
HF config.json or a sweep's metrics imports it."""
from __future__ import annotations

import math


def is_number(v) -> bool:
    """A JSON number: an int or a float, never a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_finite(v) -> bool:
    """A JSON number that is neither NaN nor an infinity, nor an integer past float range
    (JSON allows 10**400; a reader that does arithmetic or formats it would raise)."""
    try:
        return is_number(v) and math.isfinite(v)
    except OverflowError:
        return False


def is_count(v) -> bool:
    """A JSON integer that counts something (passes, tokens, a step): an int >= 0."""
    return is_number(v) and isinstance(v, int) and v >= 0


def integral(v) -> int | None:
    """`v` as an int when it is an integer: an int, or a finite float with an integer value
    (some writers emit 4096.0 for 4096); else None."""
    if is_number(v) and isinstance(v, int):
        return v
    if is_finite(v) and v.is_integer():
        return int(v)
    return None


def number(v):
    """`v` when it is a finite number, else None (a record's optional number)."""
    return v if is_finite(v) else None
