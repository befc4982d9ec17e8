"""`spark compile` and `spark dump`."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sparktrain.core.textout import printable_lines


def register(sub) -> None:
    p = sub.add_parser("compile", help="compile a .spark source to SPARK_BC bytes", description=(
        "Compile a .spark source to a .sparkbc program (byte-exact; see docs/sparkbc.md)."))
    p.add_argument("source", metavar="SRC", help=".spark source file")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output .sparkbc file (default: SRC with the .sparkbc suffix)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("dump", help="disassemble a .sparkbc program", description="List a "
                       ".sparkbc program: header, sections, string and const pools, xrefs, code, "
                       "train jobs.")
    p.add_argument("file", metavar="FILE", help=".sparkbc file")
    p.add_argument("--json", action="store_true", help="print the same facts as canonical JSON")
    p.set_defaults(func=cmd_dump)


def read_source(path: str | os.PathLike) -> str:
    """A .spark file's text; unreadable or non-UTF-8 input is a one-line error."""
    from sparktrain.bc.codec import read_bytes
    from sparktrain.core.errors import SourceError

    raw = read_bytes(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        before = raw[:err.start]  # the column: bytes since the last newline, from 1
        raise SourceError(f"not UTF-8 text (byte offset {err.start})", os.fspath(path),
                          before.count(b"\n") + 1, len(before) - before.rfind(b"\n")) from None


def cmd_compile(args: argparse.Namespace) -> int:
    from sparktrain.bc.compiler import compile_source
    from sparktrain.core.errors import SparkError
    from sparktrain.core.fsutil import atomic_write_bytes, sha256_bytes
    from sparktrain.core.gate import check_output

    out = Path(args.output) if args.output else Path(args.source).with_suffix(".sparkbc")
    target = check_output(out, "sparkbc", (args.source,))
    data = compile_source(read_source(args.source), args.source)   # raises before any write
    try:
        atomic_write_bytes(target, data)
    except OSError as err:
        raise SparkError(f"cannot write {out}: {err.strerror or err}") from None
    print(f"wrote {out} ({len(data)} bytes, sha256 {sha256_bytes(data)})")
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    from sparktrain.bc.dump import dump_json, dump_text
    from sparktrain.bc.codec import read_program
    from sparktrain.core.fsutil import canonical_json

    program, _data = read_program(args.file)
    sys.stdout.write(canonical_json(dump_json(program)) if args.json
                     else printable_lines(dump_text(program)))
    return 0
