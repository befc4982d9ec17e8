"""SPARK_BC bytes and what is done with them: bytes <-> Program (decode, encode,
read_program); the disassembly, xrefs and the two listings (dump_json is written by the
decode-bc stage and hashed, so it holds only facts of the bytes: no paths, no times); and the
interpreter of the executable subset (docs/sparkbc.md): a HANDLED op's `handlers[name](ins,
values)` dict is bound to `bind` and printed as one JSON line, the whole program checked
first, so one that would fail does so before a handler touches a file."""
from __future__ import annotations

import json
import os
import struct
import sys
from typing import Callable, Iterator, TextIO

from sparktrain.bc.program import (BY_CODE, BY_NAME, CONST_KINDS, HALT, MAGIC, MAX_INSTRUCTIONS,
                                   MAX_OUTPUT_BYTES, VERSION, Instruction, Program, const_value,
                                   operand_values, train_decls)
from sparktrain.core.errors import BytecodeError, SparkError, printable
from sparktrain.core.fsutil import read_input, sha256_bytes

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


def decode_string(cur: Cursor, index: int) -> str:
    nbytes = U16.decode(cur, f"length of string {index}")
    at = cur.pos
    raw = cur.take(nbytes, f"bytes of string {index}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BytecodeError(f"string {index} is not valid UTF-8 ({err.reason}); "
                            f"{RECOMPILE}", at + err.start) from None


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


def iter_instructions(code: bytes, base: int = 0) -> Iterator[Instruction]:
    """The instructions of `code` in order (`base`: file offset of code byte 0); structural
    only (opcode known, operands present): ranges and HALT are the caller's to check."""
    offset = 0
    while offset < len(code):
        ins = decode_instruction(code, offset, base)
        yield ins
        offset += ins.size


def _decode_code(code: bytes, base: int, nconsts: int) -> tuple[Instruction, ...]:
    if not code:
        raise BytecodeError(f"code section is empty; a program must end with HALT; {RECOMPILE}",
                            base)
    out = []
    for ins in iter_instructions(code, base):
        if len(out) == MAX_INSTRUCTIONS:
            raise BytecodeError(f"more than {MAX_INSTRUCTIONS} instructions; spark does not "
                                f"decode programs that long", base + ins.offset)
        for k, index in enumerate(ins.operands):
            if index >= nconsts:
                raise BytecodeError(f"{ins.name} at code+{ins.offset} uses const {index}, but "
                                    f"the pool has {nconsts} const(s); {RECOMPILE}",
                                    base + ins.offset + 1 + U16.size * k)
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
    head = cur.data[:len(MAGIC)]
    if head != MAGIC[:len(head)]:
        raise BytecodeError(f"not a SPARK_BC file (magic {head!r} at offset 0); "
                            "compile a .spark source with `spark compile`", 0)
    cur.take(len(MAGIC), "magic")
    version = U8.decode(cur, "version byte")
    if version != VERSION:
        raise BytecodeError(f"unsupported SPARK_BC version {version} (this spark reads "
                            f"version {VERSION}); {RECOMPILE}", len(MAGIC))
    nstrings = U16.decode(cur, "string count")
    strings = tuple(decode_string(cur, i) for i in range(nstrings))
    nconsts = U16.decode(cur, "const count")
    consts = tuple(decode_const(cur, i, nstrings) for i in range(nconsts))
    ncode = U32.decode(cur, "code length")
    code_bytes = cur.take(ncode, f"code section of {ncode} byte(s)")
    code = _decode_code(code_bytes, cur.pos - len(code_bytes), nconsts)
    if cur.left:
        raise BytecodeError(f"{cur.left} byte(s) after the code section; the file must end "
                            f"there; {RECOMPILE}", cur.pos)
    return Program(version, strings, consts, code)


def read_program(path: str | os.PathLike) -> tuple[Program, bytes]:
    """decode() a .sparkbc file; the error message is prefixed with the path."""
    data = read_input(path, "program")
    try:
        return decode(data), data
    except BytecodeError as err:
        # errors.py appends " (at byte offset N)"; rebuild with the path in front.
        detail = str(err).removesuffix(f" (at byte offset {err.offset})")
        raise BytecodeError(f"{os.fspath(path)}: {detail}", err.offset) from None


def encode(program: Program) -> bytes:
    parts = [MAGIC, U8.pack(program.version), U16.pack(len(program.strings))]
    parts.extend(U16.pack(len(raw)) + raw for raw in (s.encode("utf-8") for s in program.strings))
    parts.append(U16.pack(len(program.consts)))
    parts.extend(U8.pack(kind) + U16.pack(payload) for kind, payload in program.consts)
    code = b"".join(encode_instruction(ins) for ins in program.code)
    parts.append(U32.pack(len(code)) + code)
    return b"".join(parts)


PER_INSTRUCTION = 256  # bytes a listed instruction costs besides its operand values


def check_dump_size(program: Program) -> None:
    """Refuse a listing far larger than the file before building it: every use of a
    const repeats its string, so a small file can ask for gigabytes."""
    value_bytes = [len(s.encode("utf-8")) for s in program.strings]
    size = sum(value_bytes) * 2
    for ins in program.code:
        size += PER_INSTRUCTION + sum(value_bytes[program.consts[i][1]] for i in ins.operands)
        if size > MAX_OUTPUT_BYTES:
            raise SparkError(f"the listing of this program would be over {MAX_OUTPUT_BYTES:,} "
                             f"bytes (const strings repeated at instruction code+{ins.offset}); "
                             "not printed")


def xrefs(program: Program) -> dict[int, list[int]]:
    """const index -> code offsets of the instructions using it (every const listed)."""
    refs: dict[int, list[int]] = {i: [] for i in range(len(program.consts))}
    for ins in program.code:
        for index in dict.fromkeys(ins.operands):     # once per instruction
            refs[index].append(ins.offset)
    return refs


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _hex(ins: Instruction) -> str:
    return encode_instruction(ins).hex(" ")


def dump_json(program: Program) -> dict:
    check_dump_size(program)
    data = encode(program)
    values = {ins.offset: operand_values(program, ins) for ins in program.code}
    return {
        "header": {"magic": MAGIC.decode("ascii"), "version": program.version,
                   "size": len(data), "sha256": sha256_bytes(data)},
        "sections": [{"name": s.name, "offset": s.offset, "size": s.size}
                     for s in program.sections],
        "code_base": program.code_base,
        "strings": list(program.strings),
        "consts": [{"index": i, "kind": CONST_KINDS[kind], "string": payload,
                    "value": program.strings[payload]}
                   for i, (kind, payload) in enumerate(program.consts)],
        "xrefs": [{"const": i, "code_offsets": offsets}
                  for i, offsets in xrefs(program).items()],
        "code": [{"offset": ins.offset, "opcode": ins.opcode, "name": ins.name,
                  "bytes": _hex(ins), "operands": list(ins.operands),
                  "operand_names": list(BY_CODE[ins.opcode].operand_names),
                  "values": list(values[ins.offset])}
                 for ins in program.code],
        "train": [decl._asdict() for decl in train_decls(program)],
    }


def dump_text(program: Program) -> str:
    check_dump_size(program)
    data = encode(program)
    lines = [f"SPARK_BC v{program.version}  {len(data)} bytes  sha256 {sha256_bytes(data)}",
             "", "sections:"]
    lines += [f"  {s.name:<8} offset {s.offset:<5} size {s.size}" for s in program.sections]
    lines += [f"  (code+0 is byte {program.code_base})", "",
              f"strings ({len(program.strings)}):"]
    lines += [f"  str{i}  {_quote(s)}" for i, s in enumerate(program.strings)]
    lines += ["", f"consts ({len(program.consts)}):"]
    lines += [f"  const{i}  {CONST_KINDS[kind]} str{payload}  {_quote(program.strings[payload])}"
              for i, (kind, payload) in enumerate(program.consts)]
    lines += ["", "xrefs:"]
    by_offset = {ins.offset: ins for ins in program.code}
    for i, offsets in xrefs(program).items():
        users = ", ".join(f"code+{o} {by_offset[o].name}" for o in offsets) or "(unused)"
        lines.append(f"  const{i} {_quote(const_value(program, i))} <- {users}")
    lines += ["", f"code ({program.code_size} bytes, {len(program.code)} instructions):"]
    for ins in program.code:
        args = "".join(f" const{i} {_quote(const_value(program, i))}" for i in ins.operands)
        lines.append(f"code+{ins.offset}  {_hex(ins)}  {ins.name} (0x{ins.opcode:02X}){args}")
    decls = train_decls(program)
    if decls:
        lines += ["", "train:"]
        lines += [f"  code+{d.offset}  job {_quote(d.job)}: dataset {_quote(d.dataset)} "
                  f"base {_quote(d.base)} out {_quote(d.out)} method {_quote(d.method)} "
                  f"-> {d.bind}" for d in decls]
    return "\n".join(lines) + "\n"


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
