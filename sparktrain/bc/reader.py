"""decode(bytes) -> Program: every malformed input is a BytecodeError naming its offset,
checked in file order (magic, version, then each section)."""
from __future__ import annotations

import os
from typing import Iterator

from sparktrain.bc import codec
from sparktrain.bc.codec import RECOMPILE, U16, U32, Cursor
from sparktrain.bc.opcodes import HALT
from sparktrain.bc.program import MAX_INSTRUCTIONS, Instruction, Program
from sparktrain.core.errors import BytecodeError
from sparktrain.core.fsutil import read_input


def iter_instructions(code: bytes, base: int = 0) -> Iterator[Instruction]:
    """The instructions of `code` in order (`base`: file offset of code byte 0); structural
    only (opcode known, operands present): ranges and HALT are the caller's to check."""
    offset = 0
    while offset < len(code):
        ins = codec.decode_instruction(code, offset, base)
        yield ins
        offset += ins.size


def _check_operands(ins: Instruction, nconsts: int, base: int) -> None:
    for k, index in enumerate(ins.operands):
        if index >= nconsts:
            raise BytecodeError(f"{ins.name} at code+{ins.offset} uses const {index}, but the "
                                f"pool has {nconsts} const(s); {RECOMPILE}",
                                base + ins.offset + 1 + U16.size * k)


def _decode_code(code: bytes, base: int, nconsts: int) -> tuple[Instruction, ...]:
    if not code:
        raise BytecodeError(f"code section is empty; a program must end with HALT; {RECOMPILE}",
                            base)
    out = []
    for ins in iter_instructions(code, base):
        if len(out) == MAX_INSTRUCTIONS:
            raise BytecodeError(f"more than {MAX_INSTRUCTIONS} instructions; spark does not "
                                f"decode programs that long", base + ins.offset)
        _check_operands(ins, nconsts, base)
        out.append(ins)
        # checked before decoding further: junk after HALT is reported as such
        if ins.opcode == HALT and ins.offset + ins.size != len(code):
            raise BytecodeError(f"{len(code) - ins.offset - 1} code byte(s) after HALT at "
                                f"code+{ins.offset}; HALT must be last; {RECOMPILE}",
                                base + ins.offset + 1)
    if out[-1].opcode != HALT:
        raise BytecodeError(f"code does not end with HALT (last is {out[-1].name} at "
                            f"code+{out[-1].offset}); {RECOMPILE}", base + len(code))
    return tuple(out)


def decode(data: bytes) -> Program:
    cur = Cursor(bytes(data))
    codec.decode_magic(cur)
    version = codec.decode_version(cur)
    nstrings = U16.decode(cur, "string count")
    strings = tuple(codec.decode_string(cur, i) for i in range(nstrings))
    nconsts = U16.decode(cur, "const count")
    consts = tuple(codec.decode_const(cur, i, nstrings) for i in range(nconsts))
    ncode = U32.decode(cur, "code length")
    code_bytes = cur.take(ncode, f"code section of {ncode} byte(s)")
    code = _decode_code(code_bytes, cur.pos - len(code_bytes), nconsts)
    if cur.left:
        raise BytecodeError(f"{cur.left} byte(s) after the code section; the file must end "
                            f"there; {RECOMPILE}", cur.pos)
    return Program(version, strings, consts, code)


def read_bytes(path: str | os.PathLike) -> bytes:
    """A program file's bytes; a missing or unreadable file is a one-line SparkError."""
    return read_input(path, "program")


def read_program(path: str | os.PathLike) -> tuple[Program, bytes]:
    """decode() a .sparkbc file; the error message is prefixed with the path."""
    data = read_bytes(path)
    try:
        return decode(data), data
    except BytecodeError as err:
        # errors.py appends " (at byte offset N)"; rebuild with the path in front.
        detail = str(err).removesuffix(f" (at byte offset {err.offset})")
        raise BytecodeError(f"{os.fspath(path)}: {detail}", err.offset) from None
