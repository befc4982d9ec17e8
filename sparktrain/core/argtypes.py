"""Count values from the command line and the environment, with one-line errors
(exit 2): argparse types for the command modules, and environment counts."""
from __future__ import annotations

import argparse
import os

from sparktrain.core.errors import SparkError


def name_arg(text: str) -> str:
    """A name flag (--scale): not empty, not blank, at most 200 characters."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a name, got an empty string")
    if len(text) > 200:
        raise argparse.ArgumentTypeError(f"a name of {len(text):,} characters; at most 200")
    return text


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def env_count(name: str, default, environ=os.environ, most: int | None = None):
    """A positive integer (at most `most`) from environment variable `name`, `default` (or
    its call) when unset or blank, else one line naming the variable."""
    text = environ.get(name, "").strip()
    if not text:
        return default() if callable(default) else default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SparkError(f"{name} must be a positive integer, got {text[:40]!r}")
    if most is not None and value > most:
        raise SparkError(f"{name}={value:,} is above the limit of {most:,}")
    return value
