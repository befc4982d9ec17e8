"""The value types of params.yaml's schema (sparktrain/params.py): a float knob as a YAML
number, or a string that spells one, that float32 holds; a count (an int >= 1)."""
from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, StrictInt

from sparktrain.core.values import is_finite, is_number

FLOAT32_MAX = 3.4028234663852886e38   # numpy.finfo(numpy.float32).max
FLOAT32_TINY = 1.401298464324817e-45  # float32's smallest subnormal


def _as_float(value):
    """A YAML number, or a string that spells one: PyYAML reads `1e-3` as a string,
    and `dvc exp run -S step.lr=1e-3` writes it that way."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if not is_number(value):
        raise ValueError(f"must be float, got {type(value).__name__} {value!r}")
    if not is_finite(value):
        raise ValueError(f"must be a finite number, got {value!r}")
    # the model computes in float32: past its largest a knob is infinite there, and a
    # nonzero one below its smallest is 0 (docs/pipeline.md "Hostile inputs")
    if abs(value) > FLOAT32_MAX:
        raise ValueError(f"must be at most {FLOAT32_MAX:.8g} in size (float32's largest; "
                         f"it is infinite there), got {value!r}")
    if value and abs(value) < FLOAT32_TINY:
        raise ValueError(f"must be 0 or at least {FLOAT32_TINY:.2g} in size (float32's "
                         f"smallest; it is 0 there), got {value!r}")
    return float(value)


Float = Annotated[float, BeforeValidator(_as_float)]
Count = Annotated[StrictInt, Field(ge=1)]
