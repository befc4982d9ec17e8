"""core/values.py: the one spelling of what a value read from JSON or YAML is."""
import pytest

from sparktrain.core.values import integral, is_count, is_finite, is_number, number


@pytest.mark.parametrize("value, num, finite, count, as_int", [
    (0, True, True, True, 0),
    (7, True, True, True, 7),
    (-1, True, True, False, -1),
    (4096.0, True, True, False, 4096),      # some HF writers emit integer sizes as floats
    (2.5, True, True, False, None),
    (float("nan"), True, False, False, None),
    (float("inf"), True, False, False, None),
    (10 ** 400, True, False, True, 10 ** 400),   # JSON allows it; no float holds it
    (True, False, False, False, None),      # a bool is an int to Python, never to a record
    ("3", False, False, False, None),
    (None, False, False, False, None),
])
def test_each_check_says_what_a_value_is(value, num, finite, count, as_int):
    assert is_number(value) is num
    assert is_finite(value) is finite
    assert is_count(value) is count
    assert integral(value) == as_int and type(integral(value)) is type(as_int)
    assert number(value) == (value if finite else None)
