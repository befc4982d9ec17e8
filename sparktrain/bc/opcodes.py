"""The SPARK_BC v1 opcode table, as data, and the maps derived from it. Operand names are
docs/sparkbc.md's; opcodes this project only decodes and dumps have positional ones
(`arg0`, ...). 0x08, 0x0B and 0x0C are unassigned, hence unknown."""
from __future__ import annotations

from typing import NamedTuple


class Opcode(NamedTuple):
    code: int
    name: str
    n_operands: int
    operand_names: tuple[str, ...]


def _args(n: int) -> tuple[str, ...]:
    return tuple(f"arg{i}" for i in range(n))


TABLE: list[Opcode] = [Opcode(*row) for row in (
    (0x00, "HALT", 0, ()),
    (0x01, "MODEL", 1, ("alias",)),
    (0x02, "ASK", 2, ("prompt", "bind")),
    (0x03, "PRINT", 1, ("name",)),
    (0x04, "LET", 2, ("name", "value")),
    (0x05, "CLASSIFY", 2, _args(2)),
    (0x06, "EXTRACT", 3, _args(3)),
    (0x07, "PIPELINE", 0, ()),
    (0x09, "LISTEN", 1, _args(1)),
    (0x0A, "SPEAK", 1, _args(1)),
    (0x0D, "VOICE", 0, ()),
    (0x0E, "ENGINE_FETCH", 2, _args(2)),
    (0x0F, "ENGINE_FETCH_PARSE", 2, _args(2)),
    (0x10, "ENGINE_PARSE", 2, _args(2)),
    (0x11, "ENGINE_CSS", 1, _args(1)),
    (0x12, "ENGINE_LAYOUT", 1, _args(1)),
    (0x13, "ENGINE_PAINT_BOXES", 1, _args(1)),
    (0x14, "ENGINE_PAINT_FIXTURE", 1, _args(1)),
    (0x15, "ENGINE_SHOW", 2, _args(2)),
    (0x16, "ENGINE_RENDER", 1, _args(1)),
    (0x17, "IDE_OPEN", 2, _args(2)),
    (0x18, "IDE_RUN", 1, _args(1)),
    (0x19, "IDE_ASK", 1, _args(1)),
    (0x1A, "IDE_SHOW", 2, _args(2)),
    (0x1B, "REVIEW_PATH", 2, _args(2)),
    (0x1C, "REVIEW_TEXT", 2, _args(2)),
    (0x1D, "BROWSER_RUN", 2, _args(2)),
    (0x1E, "BROWSER_GOTO", 2, _args(2)),
    (0x1F, "MITM_ENABLE", 1, _args(1)),
    (0x20, "TOOL", 1, _args(1)),
    (0x21, "WITH", 1, _args(1)),
    (0x22, "WITH_END", 0, ()),
    (0x23, "EMBED", 2, _args(2)),
    (0x24, "RETRIEVE", 2, _args(2)),
    (0x25, "EXPECT", 3, ("mode", "name", "want")),
    (0x26, "TRAIN", 5, ("dataset", "base", "out", "method", "bind")),
    (0x27, "TRAIN_STATUS", 2, ("job_id", "bind")),
    (0x28, "STEP", 2, ("job_id", "bind")),
)]

BY_CODE: dict[int, Opcode] = {op.code: op for op in TABLE}
BY_NAME: dict[str, Opcode] = {op.name: op for op in TABLE}

HALT = BY_NAME["HALT"].code
