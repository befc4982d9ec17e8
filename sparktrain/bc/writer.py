"""encode(Program) -> bytes: the field codecs of codec.py, in file order."""
from __future__ import annotations

from sparktrain.bc import codec
from sparktrain.bc.program import MAGIC, Program


def encode(program: Program) -> bytes:
    parts = [MAGIC, codec.U8.pack(program.version), codec.U16.pack(len(program.strings))]
    parts.extend(codec.encode_string(s) for s in program.strings)
    parts.append(codec.U16.pack(len(program.consts)))
    parts.extend(codec.encode_const(c) for c in program.consts)
    code = b"".join(codec.encode_instruction(ins) for ins in program.code)
    parts.append(codec.U32.pack(len(code)) + code)
    return b"".join(parts)
