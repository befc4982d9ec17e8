"""Immutable records of a decoded program and the facts derived from them; SPARK_BC has
no padding, so section offsets and sizes follow from the content (`sections`, `size`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

from sparktrain.bc.opcodes import BY_NAME

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
