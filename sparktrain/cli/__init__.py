"""The `spark` command.

Each module of this folder registers one area's subcommands (a `register(sub)`
function: cli/bc.py, cli/train.py, ...); this module only builds the parser, runs
the chosen handler and turns the project's errors into one line + exit 2.
Handlers import numpy and friends lazily so `spark --help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from sparktrain import __version__
from sparktrain.core.errors import SparkError, printable

COMMAND_MODULES = (
    "sparktrain.cli.bc",      # compile, dump
    "sparktrain.cli.train",   # train, run, status
    "sparktrain.cli.original",  # apply-step, code train (the original's commands)
    "sparktrain.cli.bench",   # bench
    "sparktrain.cli.eval",    # eval, generate, make-data, plot, compare
    "sparktrain.cli.repro",   # repro-check
    "sparktrain.cli.export",  # export, import
    "sparktrain.cli.sweep",   # sweep
)


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors also exit 2, but with one line, not the usage block."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="spark",
        description="Compile, inspect and run SPARK_BC training programs; train, "
                    "evaluate and sample tiny transformer LMs with numpy.",
        epilog="`spark --run-bc PROGRAM.sparkbc` is an alias of `spark run PROGRAM.sparkbc`.",
    )
    parser.add_argument("--version", action="version", version=f"spark {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from sparktrain import runtime  # first, before anything loads numpy

    try:
        runtime.start()
    except SparkError as err:
        print(f"spark: error: {printable(str(err))}", file=sys.stderr)
        return 2
    if argv and argv[0] == "--run-bc":
        argv[0] = "run"
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from sparktrain.repro.interrupt import Terminated, on_sigterm

    on_sigterm()  # SIGTERM unwinds like Ctrl-C: every `finally` runs, no .live-run left
    try:
        return int(args.func(args) or 0)
    except Terminated:
        print("spark: terminated (SIGTERM); the last good outputs are intact", file=sys.stderr)
        return 143
    except SparkError as err:
        print(f"spark: error: {printable(str(err))}", file=sys.stderr)
        return getattr(err, "exit_code", 2)
    except KeyboardInterrupt:
        print("spark: interrupted", file=sys.stderr)
        return 130
    except MemoryError:  # the estimate (model/memory.py) missed; still one line
        print("spark: error: out of memory; use a smaller scale or batch", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as err:  # a path the OS refuses (a name over 255 bytes, a loop of links)
        if err.filename is None:
            raise
        name = printable(os.fsdecode(err.filename))
        name = name if len(name) <= 80 else name[:77] + "..."
        print(f"spark: error: cannot use {name}: {err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
