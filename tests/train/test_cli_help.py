"""What a newcomer reads first: every subcommand's --help ends with an example,
`spark-code --help` names spark-code, and a typo gets the closest name (difflib)."""
from __future__ import annotations

import pytest

from sparkhelp import assert_one_line_error, run_spark
from sparktrain.cli import EXAMPLES, build_parser, subcommands
from sparktrain.cli.original import code_main
from sparktrain.core.errors import SparkError
from sparktrain.params import parse_params
from sparktrain.train.recipes import load_recipe


def _leaves(parser, prefix=""):
    for name, child in subcommands(parser).items():
        yield prefix + name, child
        yield from _leaves(child, f"{prefix}{name} ")


def test_every_subcommand_help_has_one_example():
    found = dict(_leaves(build_parser()))
    assert set(found) == set(EXAMPLES), set(found) ^ set(EXAMPLES)
    for name, parser in found.items():
        text = parser.format_help()
        assert text.count("example: ") == 1, name
        assert f"example: spark {name}" in " ".join(text.split()), name


def test_spark_code_help_says_spark_code(capsys):
    for argv, usage in ((["--help"], "usage: spark-code "), (["train", "--help"],
                                                             "usage: spark-code train ")):
        with pytest.raises(SystemExit):
            code_main(argv)
        out = capsys.readouterr().out
        assert out.startswith(usage), out
        assert "spark code" not in out.replace("`spark code train --scale S`", "").replace(
            "`spark code\nCOMMAND`", "").replace("`spark code COMMAND`", "")


def test_train_help_says_what_params_defaults_to():
    train = subcommands(build_parser())["train"].format_help()
    assert "for `run`" not in train
    assert "every knob's default" in " ".join(train.split())


def test_a_mistyped_subcommand_says_the_closest(project):
    rc, _, err = run_spark(["trian"], cwd=project)
    assert_one_line_error(rc, err, "invalid choice: 'trian'", "did you mean 'train'?")


@pytest.mark.parametrize("raw, needle", [
    ({"sclae": "tiny"}, "unknown key sclae; did you mean 'scale'?"),
    ({"step": {"lrr": 0.1}}, "unknown key step.lrr; did you mean 'lr'?"),
    ({"scales": {"w": {"dimm": 3}}}, "unknown key scales.w.dimm; did you mean 'dim'?"),
    ({"scale": "tinny"}, "unknown scale 'tinny'; known: "),
])
def test_a_mistyped_key_or_scale_says_the_closest(raw, needle):
    with pytest.raises(SparkError, match="did you mean") as err:
        parse_params({"job": "job-a", "program": "p.sparkbc", **raw})
    assert needle in str(err.value)


def test_a_mistyped_recipe_says_the_closest():
    with pytest.raises(SparkError, match="did you mean 'large'"):
        load_recipe("larg")
