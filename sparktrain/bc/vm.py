"""The interpreter of SPARK_BC's executable subset (docs/sparkbc.md): a HANDLED op's
`handlers[name](ins, values)` dict is bound to `bind` and printed as one JSON line. The
whole program is checked first, so one that would fail does so before a handler touches a file."""
from __future__ import annotations

import json
import sys
from typing import Callable, TextIO

from sparktrain.bc.program import BY_NAME, MAX_OUTPUT_BYTES, Instruction, Program, operand_values
from sparktrain.core.errors import SparkError, printable

Handler = Callable[[Instruction, tuple[str, ...]], dict]

HANDLED = ("TRAIN", "STEP", "TRAIN_STATUS")          # dispatched to handlers
BUILTIN = ("HALT", "MODEL", "LET", "PRINT")          # run by execute() itself
EXECUTABLE = BUILTIN + HANDLED
RESULT_BYTES = 4096  # a bound on one printed handler result (a JSON line of a job's state)


def compact_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _binds(ins: Instruction, values: tuple[str, ...]) -> str | None:
    """The name an instruction binds (LET's `name`, otherwise a `bind` operand), if any."""
    key = "name" if ins.name == "LET" else "bind"
    names = BY_NAME[ins.name].operand_names
    return values[names.index(key)] if key in names else None


def check_executable(program: Program) -> None:
    """Reject, before running anything, what would stop the run halfway."""
    bound: dict[str, int] = {}   # name -> bytes a PRINT of it writes
    printed = 0
    for ins in program.code:
        values = operand_values(program, ins)
        if ins.name not in EXECUTABLE:
            raise SparkError(f"opcode {ins.name} (0x{ins.opcode:02X}) at code+{ins.offset} is not "
                             f"executable by spark; executable: {', '.join(EXECUTABLE)}")
        if ins.name == "PRINT" and values[0] not in bound:
            raise SparkError(f"PRINT at code+{ins.offset} prints {values[0]!r}, which no earlier "
                             "instruction binds; bind it with `-> name` or `let`")
        printed += RESULT_BYTES if ins.name in HANDLED else 0
        if ins.name == "PRINT":
            printed += bound[values[0]]
        if printed > MAX_OUTPUT_BYTES:
            raise SparkError(f"program would print over {MAX_OUTPUT_BYTES:,} bytes (at "
                             f"{ins.name} code+{ins.offset}); not run")
        name = _binds(ins, values)
        if name is not None:
            bound[name] = len(values[1].encode("utf-8")) + 1 if ins.name == "LET" else RESULT_BYTES


def execute(program: Program, handlers: dict[str, Handler],
            out: TextIO | None = None) -> dict[str, object]:
    """Run `program`; returns the bindings. `out` defaults to sys.stdout at call time."""
    out = out if out is not None else sys.stdout
    check_executable(program)
    bindings: dict[str, object] = {}
    for ins in program.code:
        values = operand_values(program, ins)
        if ins.name == "HALT":
            break
        if ins.name == "LET":
            bindings[values[0]] = values[1]
        elif ins.name == "PRINT":
            value = bindings[values[0]]
            text = value if isinstance(value, str) else compact_json(value)
            isatty = getattr(out, "isatty", None)
            print(printable(text, keep="\n\t") if isatty and isatty() else text, file=out)
        elif ins.name in HANDLED:
            handler = handlers.get(ins.name)
            if handler is None:
                raise SparkError(f"{ins.name} at code+{ins.offset} has no handler in this spark")
            result = handler(ins, values)
            if not isinstance(result, dict):
                raise TypeError(f"{ins.name} handler returned {type(result).__name__}, not dict")
            bindings[_binds(ins, values)] = result
            print(compact_json(result), file=out)
        # MODEL names the model alias; nothing here reads it
    return bindings
