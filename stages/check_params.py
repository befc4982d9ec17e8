"""DVC stage check-params: the whole params.yaml is valid.

Every stage validates the whole file, but DVC re-runs a stage only when one of
its own keys changed: a typo in a new top-level key (`sclae: large`) would
re-run nothing and be silently ignored. This stage tracks the whole file, so
any edit runs the check; it writes nothing.
"""
import sys

from stages.common import params, run


def check_params() -> None:
    params()


if __name__ == "__main__":
    sys.exit(run("check-params", check_params))
