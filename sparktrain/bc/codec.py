"""The SPARK_BC fields: each decoder reads through a Cursor and raises BytecodeError at
the offset of the field that is wrong; beside it, its encoder. reader.py and writer.py
put them in file order, so `encode(decode(b)) == b`."""
from __future__ import annotations

import struct

from sparktrain.bc.opcodes import BY_CODE
from sparktrain.bc.program import CONST_KINDS, MAGIC, VERSION, Instruction
from sparktrain.core.errors import BytecodeError

RECOMPILE = "recompile its source with `spark compile`"


class Cursor:
    """A read position in `data`; a short read is a truncation error at that position."""

    def __init__(self, data: bytes, pos: int = 0):
        self.data = data
        self.pos = pos

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n > self.left:
            raise BytecodeError(
                f"file is truncated: {what} needs {n} byte(s), only {self.left} left; {RECOMPILE}",
                self.pos)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk


class UInt(struct.Struct):
    """A little-endian unsigned integer field: pack(value) -> bytes, decode(cursor, what)."""

    def decode(self, cur: Cursor, what: str) -> int:
        return self.unpack(cur.take(self.size, what))[0]


U8, U16, U32 = UInt("<B"), UInt("<H"), UInt("<I")


def decode_magic(cur: Cursor) -> None:
    head = cur.data[:len(MAGIC)]
    if head != MAGIC[:len(head)]:
        raise BytecodeError(f"not a SPARK_BC file (magic {head!r} at offset 0); "
                            "compile a .spark source with `spark compile`", 0)
    cur.take(len(MAGIC), "magic")


def decode_version(cur: Cursor) -> int:
    at = cur.pos
    version = U8.decode(cur, "version byte")
    if version != VERSION:
        raise BytecodeError(f"unsupported SPARK_BC version {version} (this spark reads "
                            f"version {VERSION}); {RECOMPILE}", at)
    return version


def encode_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return U16.pack(len(raw)) + raw


def decode_string(cur: Cursor, index: int) -> str:
    nbytes = U16.decode(cur, f"length of string {index}")
    at = cur.pos
    raw = cur.take(nbytes, f"bytes of string {index}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BytecodeError(f"string {index} is not valid UTF-8 ({err.reason}); "
                            f"{RECOMPILE}", at + err.start) from None


def encode_const(const: tuple[int, int]) -> bytes:
    kind, payload = const
    return U8.pack(kind) + U16.pack(payload)


def decode_const(cur: Cursor, index: int, nstrings: int) -> tuple[int, int]:
    at = cur.pos
    entry = Cursor(cur.take(U8.size + U16.size, f"const {index} entry"))
    kind = U8.decode(entry, "const kind")
    payload = U16.decode(entry, "const payload")
    if kind not in CONST_KINDS:
        raise BytecodeError(f"const {index} has unknown kind {kind} (v1 knows only "
                            f"0 = STR); {RECOMPILE}", at)
    if payload >= nstrings:
        raise BytecodeError(f"const {index} points at string {payload}, but the pool has "
                            f"{nstrings} string(s); {RECOMPILE}", at + U8.size)
    return kind, payload


def encode_instruction(ins: Instruction) -> bytes:
    return U8.pack(ins.opcode) + b"".join(U16.pack(i) for i in ins.operands)


def decode_instruction(code: bytes, offset: int, base: int) -> Instruction:
    """The instruction at code[offset]; errors name the absolute offset base + offset."""
    op = BY_CODE.get(code[offset])
    if op is None:
        raise BytecodeError(f"unknown opcode 0x{code[offset]:02X} at code+{offset}; "
                            f"this file was not written by `spark compile` v1", base + offset)
    size = 1 + U16.size * op.n_operands
    if offset + size > len(code):
        raise BytecodeError(f"{op.name} at code+{offset} is cut off by the end of code "
                            f"(needs {size} bytes, {len(code) - offset} left); {RECOMPILE}",
                            base + offset)
    cur = Cursor(code, offset + 1)
    operands = tuple(U16.decode(cur, f"{op.name} operand") for _ in range(op.n_operands))
    return Instruction(offset, op.code, op.name, operands)
