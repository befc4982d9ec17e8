"""The `spark` command: each module of this folder registers one area's subcommands
(`register(sub)`); this one builds the parser, runs the chosen handler and turns the
project's errors into one line + exit 2. Handlers import numpy lazily: `--help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

from sparktrain import __version__, runtime
from sparktrain.core.errors import SparkError, did_you_mean, printable

# the command table: each module registers the commands its docstring names, listed in
# --help in this order
COMMAND_MODULES = tuple(f"sparktrain.cli.{name}" for name in (
    "train", "original", "bench", "eval", "compare", "export", "sweep", "tune"))
# One example per subcommand, shown as its --help's last line.
EXAMPLES = {
    "compile": "spark compile data/programs/train-step.spark -o /tmp/step.sparkbc",
    "dump": "spark dump data/programs/train-step.sparkbc",
    "train": "spark train --dataset data/train/dataset.jsonl --out out/mine --outer 2",
    "run": "spark run data/programs/train-step.sparkbc",
    "status": "spark status job-dry-001 --summary",
    "apply-step": "spark apply-step --sparkbc data/programs/train-step.sparkbc "
                  "--weights out/a/weights.safetensors --dataset data/train/dataset.jsonl",
    "code": "spark code train --scale tiny", "code train": "spark code train --scale tiny",
    "bench": "spark bench --scale tiny",
    "eval": "spark eval --weights out/train/job-dry-001/weights.safetensors "
            "--data data/eval/tiny_heldout.jsonl",
    "generate": "spark generate --weights out/train/job-dry-001/weights.safetensors 'hi'",
    "make-data": "spark make-data --out-dir /tmp/scale-data",
    "plot": "spark plot --checkpoint out/train/job-dry-001/checkpoint.json -o /tmp/loss.png",
    "compare": "spark compare --last 4", "repro-check": "spark repro-check",
    "ci-report": "spark ci-report --base origin/main --repro-check repro-check.txt "
                 "--out report.md",
    "export": "spark export --to gguf /tmp/model.gguf "
              "--weights out/train/job-dry-001/weights.safetensors",
    "import": "spark import --from hf --out out/imported /path/to/hf-folder",
    "sweep": "spark sweep -S step.lr=0.05,0.1 --workers 2",
    "tune": "spark tune -S 'step.lr=log:0.01..0.3' -S step.seed=0,1 --trials 8 --study lr",
}
CHOICE = re.compile(r"invalid choice: '(?P<got>[^']*)' \(choose from (?P<known>.*)\)")


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors also exit 2, but with one line, not the usage block;
    an unknown subcommand or choice says the closest one. `func`: the command's handler,
    `args.func` for main (sub.add_parser(NAME, func=HANDLER, ...))."""

    def __init__(self, *args, func=None, **kwargs):
        super().__init__(*args, **kwargs)
        if func is not None:
            self.set_defaults(func=func)

    def error(self, message):
        m = CHOICE.search(message)
        if m:
            message += did_you_mean(m["got"], re.findall(r"'([^']*)'", m["known"]))
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


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


def add_cluster_flags(p: argparse.ArgumentParser) -> None:
    """Where `spark sweep` and `spark tune` run their points: the Dask cluster, the remotes
    the workers share, their scratch folder (docs/pipeline.md)."""
    p.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="a running Dask scheduler, e.g. tcp://HOST:8786 (default: a "
                        "LocalCluster on 127.0.0.1)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="LocalCluster workers, one thread each (default: usable cores; at "
                        "most twice them)")
    p.add_argument("--git-remote", default=None,
                   help="the shared git remote the workers clone and push to (default "
                        "origin; on one machine with no origin and committed DVC remote, "
                        "a local bare repository under out/sweep-remote/)")
    p.add_argument("--dvc-remote", default=None,
                   help="DVC remote for the outputs (default: .dvc/config's default remote; "
                        "on one machine without one, a local store under out/sweep-remote/)")
    p.add_argument("--scratch", default=None,
                   help="folder on each worker for its clones (default: its temp dir)")


# LocalCluster workers per usable core: each runs its own `dvc exp run`, training on one
# core; past this they only wait for each other and fill the memory
WORKERS_PER_CORE = 2


def check_cluster_flags(args: argparse.Namespace) -> None:
    if args.scheduler and args.workers:
        raise SparkError("--workers sizes the LocalCluster; with --scheduler the cluster "
                         "has its own workers")
    cores = runtime.usable_cores()
    if args.workers and args.workers > WORKERS_PER_CORE * cores:
        raise SparkError(f"--workers {args.workers}: this machine has {cores} usable core(s), "
                         f"and each worker trains on one; give at most "
                         f"{WORKERS_PER_CORE * cores}, or --scheduler for a cluster")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommand parsers by name (empty: it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _add_examples(parser, prefix: str = "") -> None:
    for name, child in subcommands(parser).items():
        example = EXAMPLES.get(prefix + name)
        if example and not child.epilog:
            child.epilog = f"example: {example}"
        _add_examples(child, f"{prefix}{name} ")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="spark", description="Compile, inspect and run SPARK_BC training "
                     "programs; train, evaluate and sample tiny transformer LMs with numpy.",
                     epilog="`spark --run-bc PROGRAM.sparkbc` is an alias of `spark run "
                     "PROGRAM.sparkbc`.")
    parser.add_argument("--version", action="version", version=f"spark {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _add_examples(parser)
    return parser


def _as_spark_code(parser: argparse.ArgumentParser) -> None:
    """`spark-code ...` runs `spark code ...`: its help and errors name `spark-code`."""
    code = subcommands(parser)["code"]
    code.prog = "spark-code"
    for name, child in [("", code), *subcommands(code).items()]:
        child.prog = f"spark-code {name}".rstrip()
        child.epilog = child.epilog and child.epilog.replace("spark code ", "spark-code ")


def main(argv: list[str] | None = None, *, spark_code: bool = False) -> int:
    """`spark ARGV`; with spark_code, ARGV starts with `code` and the help says spark-code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        runtime.start()   # first, before anything loads numpy
    except SparkError as err:
        print(f"spark: error: {printable(str(err))}", file=sys.stderr)
        return 2
    if argv and argv[0] == "--run-bc":
        argv[0] = "run"
    parser = build_parser()
    if spark_code:
        _as_spark_code(parser)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from sparktrain.repro.signals import Terminated, on_sigterm

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
    except MemoryError:  # the estimate (model/config.py) missed; still one line
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
