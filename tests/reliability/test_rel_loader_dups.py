"""Issue 35 item 6: duplicate keys refused in flow style and at every depth; a
merge key refused in one line naming its line; error lines capped."""
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.core.safeload import load_yaml


@pytest.mark.parametrize("text", [
    'corpus: {glob: "a", glob: "b"}\n',
    "scales:\n  tiny:\n    dim: 8\n    dim: 16\n",
    "scales:\n  - {dim: 8, dim: 16}\n",
])
def test_duplicate_keys_refused(text):
    with pytest.raises(SparkError, match="given twice"):
        load_yaml(text, "p.yaml")


def test_merge_key_refused_naming_the_line():
    with pytest.raises(SparkError, match=r"p.yaml:3:.*merge key") as err:
        load_yaml("a: 1\nb:\n  <<: {x: 1}\n  y: 2\n", "p.yaml")
    assert "\n" not in str(err.value)


def test_error_line_capped():
    with pytest.raises(SparkError) as err:
        load_yaml("a: [" + "x" * 900_000 + "\n: : ]\n", "p.yaml")
    assert len(str(err.value)) < 400


def test_plain_yaml_still_loads():
    assert load_yaml("a: {b: 1, c: 2}\nd: [1, 2]\n", "p.yaml") == {"a": {"b": 1, "c": 2},
                                                                    "d": [1, 2]}
