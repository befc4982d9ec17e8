"""Disassembly: xrefs and the two formats. dump_json is written by the decode-bc stage and
hashed, so it holds only facts of the bytes (no paths, no times), for canonical_json."""
from __future__ import annotations

import json

from sparktrain.bc.codec import encode, encode_instruction
from sparktrain.bc.program import (BY_CODE, CONST_KINDS, MAGIC, MAX_OUTPUT_BYTES, Instruction,
                                   Program, const_value, operand_values, train_decls)
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import sha256_bytes

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
