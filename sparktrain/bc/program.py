"""The SPARK_BC v1 format as data: the opcode table (operand names are docs/sparkbc.md's;
opcodes this project only decodes and dumps have positional ones, `arg0`, ...; 0x08, 0x0B
and 0x0C are unassigned, hence unknown) and the immutable records of a decoded program.
SPARK_BC has no padding, so section offsets and sizes follow from the content.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple


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

MAGIC = b"SPBC"
VERSION = 1
CONST_STR = 0
CONST_KINDS = {CONST_STR: "STR"}   # v1 has no other kind

HEADER_SIZE = len(MAGIC) + 1       # magic + u8 version
COUNT_SIZE = 2                     # u16 nstrings / nconsts / string nbytes
CONST_SIZE = 3                     # u8 kind + u16 payload
CODE_LEN_SIZE = 4                  # u32 ncode
# bounds that keep memory and output proportional to the file
MAX_INSTRUCTIONS = 1 << 16
MAX_OUTPUT_BYTES = 64 << 20


@dataclass(frozen=True)
class Instruction:
    offset: int                    # byte offset within the code section
    opcode: int
    name: str
    operands: tuple[int, ...]      # const indices

    @property
    def size(self) -> int:
        return 1 + 2 * len(self.operands)


class Section(NamedTuple):
    name: str
    offset: int                    # absolute file offset of the section's first byte
    size: int                      # bytes, counts and lengths included


@dataclass(frozen=True)
class Program:
    version: int
    strings: tuple[str, ...]
    consts: tuple[tuple[int, int], ...]        # (kind, payload)
    code: tuple[Instruction, ...]

    @property
    def code_size(self) -> int:
        return sum(ins.size for ins in self.code)

    @property
    def sections(self) -> tuple[Section, ...]:
        strings_size = COUNT_SIZE + sum(COUNT_SIZE + len(s.encode("utf-8")) for s in self.strings)
        consts_size = COUNT_SIZE + CONST_SIZE * len(self.consts)
        code_size = CODE_LEN_SIZE + self.code_size
        out, offset = [], 0
        for name, size in (("header", HEADER_SIZE), ("strings", strings_size),
                           ("consts", consts_size), ("code", code_size)):
            out.append(Section(name, offset, size))
            offset += size
        return tuple(out)

    @property
    def code_base(self) -> int:
        """Absolute file offset of code byte 0 (just after the u32 length)."""
        return self.sections[-1].offset + CODE_LEN_SIZE

    @property
    def size(self) -> int:
        last = self.sections[-1]
        return last.offset + last.size


class TrainDecl(NamedTuple):
    offset: int          # code offset of the TRAIN instruction
    dataset: str
    base: str
    out: str
    method: str
    bind: str
    job: str             # last path component of `out`


def layout_code(ops: Iterable[tuple[str, tuple[int, ...]]]) -> tuple[Instruction, ...]:
    """(name, operands) pairs -> Instructions with their code offsets filled in."""
    code, offset = [], 0
    for name, operands in ops:
        ins = Instruction(offset, BY_NAME[name].code, name, tuple(operands))
        code.append(ins)
        offset += ins.size
    return tuple(code)


def const_value(program: Program, index: int) -> str:
    _kind, payload = program.consts[index]   # STR is the only kind: payload = string index
    return program.strings[payload]


def operand_values(program: Program, ins: Instruction) -> tuple[str, ...]:
    return tuple(const_value(program, i) for i in ins.operands)


def job_of(out: str) -> str:
    """A job's id: the last path component of `out`, unvalidated. Plain string work: a path
    library would fold `out/train/.` into `train`, hiding a bad id from the validator."""
    return out.rstrip("/").rsplit("/", 1)[-1]


def train_decls(program: Program) -> list[TrainDecl]:
    decls = []
    for ins in program.code:
        if ins.name == "TRAIN":
            dataset, base, out, method, bind = operand_values(program, ins)
            decls.append(TrainDecl(ins.offset, dataset, base, out, method, bind, job_of(out)))
    return decls
