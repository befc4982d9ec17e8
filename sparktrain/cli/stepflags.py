"""The training flags of `spark train` and `spark apply-step`, one per field of the step
schema (sparktrain/params.py StepConfig): its name, type, choices, default and help come
from the schema, so a new knob is a flag without a line here."""
from __future__ import annotations

import argparse
import math

from sparktrain.params import StepConfig, override


def add_step_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per StepConfig field: `--batch-size`, `--no-train-attn`, `--normuon`, ...; the
    default None means "keep params.yaml's value"."""
    group = parser.add_argument_group("training knobs (override params.yaml's step section)")
    for name, info in StepConfig.__pydantic_fields__.items():
        flag = "--" + (info.alias or name).replace("_", "-")
        if info.default is True:
            group.add_argument(f"--no-{name.replace('_', '-')}", dest=name,
                               action="store_const", const=False, default=None,
                               help=f"set step.{name} to false (default true): "
                                    f"{info.description}")
        elif info.default is False:
            group.add_argument(flag, dest=name, action="store_const", const=True, default=None,
                               help=f"set step.{name} to true (default false): "
                                    f"{info.description}")
        elif "Literal" in str(info.annotation):
            group.add_argument(flag, dest=name, choices=list(info.annotation.__args__),
                               default=None, help=f"{info.description} (default {info.default})")
        else:
            kind = float if "float" in str(info.annotation) else int
            shown = "" if info.default is None else f" (default {info.default})"
            group.add_argument(flag, dest=name, type=_flag_type(info.alias or name, kind),
                               default=None, metavar=name.upper(),
                               help=f"{info.description}{shown}")


def _flag_type(name: str, kind):
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or (kind is float and not math.isfinite(value)):
            want = kind.__name__ if value is None else "a finite number"
            raise argparse.ArgumentTypeError(f"--{name.replace('_', '-')} must be {want}, "
                                             f"got {text!r}")
        return value
    return convert


def step_from_flags(base: StepConfig, args: argparse.Namespace) -> StepConfig:
    """`base` with the flags the user gave (not None) replacing its fields."""
    return override(base, **{name: getattr(args, name, None)
                             for name in StepConfig.__pydantic_fields__})
