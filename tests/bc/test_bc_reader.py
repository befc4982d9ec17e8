"""Opcode table, records, decode/encode round trips, train declarations."""
import pytest

from sparktrain.bc.codec import decode, encode, iter_instructions
from sparktrain.bc.program import (BY_CODE, BY_NAME, TABLE, Program, TrainDecl, job_of,
                                   layout_code, operand_values, train_decls)
from sparktrain.core.errors import BytecodeError


def test_table_has_the_38_spec_opcodes():
    assert len(TABLE) == 38
    assert set(range(0x00, 0x29)) - set(BY_CODE) == {0x08, 0x0B, 0x0C}
    assert len(BY_NAME) == 38
    for op in TABLE:
        assert len(op.operand_names) == op.n_operands
        assert BY_CODE[op.code] is op and BY_NAME[op.name] is op
    assert BY_NAME["TRAIN"].operand_names == ("dataset", "base", "out", "method", "bind")
    assert (BY_NAME["STEP"].code, BY_NAME["TRAIN_STATUS"].code) == (0x28, 0x27)
    assert (BY_NAME["EXPECT"].code, BY_NAME["EXPECT"].n_operands) == (0x25, 3)


def every_opcode_program() -> Program:
    """One instruction of each opcode (HALT last), operands cycling over 3 consts."""
    ops = [(op.name, tuple(k % 3 for k in range(op.n_operands)))
           for op in TABLE if op.name != "HALT"] + [("HALT", ())]
    return Program(1, ("a", "b", "ü"), ((0, 0), (0, 1), (0, 2)), layout_code(ops))


def test_every_opcode_decodes_and_round_trips():
    program = every_opcode_program()
    data = encode(program)
    assert decode(data) == program
    assert encode(decode(data)) == data
    assert len(data) == program.size
    assert [ins.name for ins in program.code] == [op.name for op in TABLE[1:]] + ["HALT"]


def test_smallest_valid_file_is_14_bytes():
    data = b"SPBC\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00"
    program = decode(data)
    assert len(data) == 14 and program.strings == () and program.consts == ()
    assert [i.name for i in program.code] == ["HALT"]
    assert encode(program) == data and program.size == 14


def test_sections_and_code_base():
    program = Program(1, ("ab",), ((0, 0),), layout_code([("MODEL", (0,)), ("HALT", ())]))
    assert [tuple(s) for s in program.sections] == [
        ("header", 0, 5), ("strings", 5, 6), ("consts", 11, 5), ("code", 16, 8)]
    assert program.code_base == 20 and program.size == 24


def test_iter_instructions_is_lazy_and_structural():
    gen = iter_instructions(b"\x03\x07\x00\x08", base=100)
    first = next(gen)
    assert (first.offset, first.name, first.operands) == (0, "PRINT", (7,))
    with pytest.raises(BytecodeError) as info:
        next(gen)
    assert info.value.offset == 103


def test_decode_accepts_bytearray_and_memoryview():
    data = encode(every_opcode_program())
    assert decode(bytearray(data)) == decode(memoryview(data)) == decode(data)


def test_train_decls_and_operand_values():
    program = Program(1, ("d.jsonl", "fixture-base", "out/train/job-7", "spark_distill_cpu",
                          "job"), tuple((0, i) for i in range(5)),
                      layout_code([("MODEL", (1,)), ("TRAIN", (0, 1, 2, 3, 4)), ("HALT", ())]))
    assert operand_values(program, program.code[0]) == ("fixture-base",)
    assert train_decls(program) == [TrainDecl(3, "d.jsonl", "fixture-base", "out/train/job-7",
                                              "spark_distill_cpu", "job", "job-7")]


@pytest.mark.parametrize("out, job", [("out/train/job-1", "job-1"), ("out/train/job-1/", "job-1"),
                                      ("job", "job"), ("out/train/.", "."),
                                      ("out/..", ".."), ("", "")])
def test_job_is_the_last_path_component(out, job):
    assert job_of(out) == job
