"""The compiler: the compatibility vector of docs/sparkbc.md, the interning rule, the grammar."""
import hashlib
from pathlib import Path

from sparktrain.bc.compiler import compile_program, compile_source
from sparktrain.bc.codec import decode

ROOT = Path(__file__).resolve().parents[2]
VECTOR = ROOT / "tests" / "vectors" / "spark-train-step.spark"
DEFAULT_SRC = ROOT / "data" / "programs" / "train-step.spark"
DEFAULT_BC = ROOT / "data" / "programs" / "train-step.sparkbc"

VECTOR_SHA256 = "d08925b52bf8c840de626c9cfec619d4dbae5a674b94bb8c7c5837eb1ac64551"
VECTOR_STRINGS = ("code", "job", "spark_distill_cpu", "out/train/job-dry-001", "fixture-base",
                  "examples/fixtures/train/dataset.jsonl", "step", "job-dry-001", "status")
VECTOR_CODE = bytes.fromhex("01 0000  26 0500 0400 0300 0200 0100  28 0700 0600"
                            "27 0700 0800  03 0100  00")


def test_spec_vector_bytes():
    data = compile_source(VECTOR.read_text(), str(VECTOR))
    assert len(data) == 201
    assert hashlib.sha256(data).hexdigest() == VECTOR_SHA256
    assert data.endswith(VECTOR_CODE)
    program = decode(data)
    assert program.strings == VECTOR_STRINGS
    assert program.consts == tuple((0, i) for i in range(len(VECTOR_STRINGS)))


def test_default_program_committed_bytes_equal_fresh_compile():
    fresh = compile_source(DEFAULT_SRC.read_text(), str(DEFAULT_SRC))
    assert DEFAULT_BC.read_bytes() == fresh


def test_default_program_shape():
    program = compile_program(DEFAULT_SRC.read_text())
    assert [i.name for i in program.code] == ["MODEL", "TRAIN", "STEP", "TRAIN_STATUS",
                                              "PRINT", "HALT"]
    assert "data/train/dataset.jsonl" in program.strings
    assert "out/train/job-dry-001" in program.strings


def test_interning_first_to_last_outside_train_family():
    program = compile_program('ask "p" -> a\nlet x "v"\nlet a "p"\nprint x\n')
    assert program.strings == ("p", "a", "x", "v")            # deduplicated, first use order
    assert [i.operands for i in program.code] == [(0, 1), (2, 3), (1, 0), (2,), ()]


def test_interning_last_to_first_in_train_family():
    program = compile_program('model step "j" -> s\nmodel status "k" -> t\n'
                              'model train dataset "d" base "b" out "o/j" method "m" -> u\n')
    assert program.strings == ("s", "j", "t", "k", "u", "m", "o/j", "b", "d")
    assert [i.operands for i in program.code] == [(1, 0), (3, 2), (8, 7, 6, 5, 4), ()]


def test_backend_dropped_build_same_as_train_keyword_order_free():
    plain = 'model train dataset "d" base "b" out "o" method "m" -> j\n'
    variants = [
        'model train dataset "d" base "b" out "o" backend "http" method "m" -> j\n',
        'model build dataset "d" base "b" out "o" method "m" -> j\n',
        'model train method "m" out "o" base "b" dataset "d" -> j\n',
        'model  train\tdataset "d" base "b" out "o" method "m"->j   # comment\n',
    ]
    expected = compile_source(plain)
    for text in variants:
        assert compile_source(text) == expected, text
    assert "http" not in decode(expected).strings


def test_comments_blank_lines_escapes_and_halt():
    program = compile_program('# header\n\n   \nlet a "say \\"hi\\" # not a comment \\\\"\n')
    assert program.strings == ("a", 'say "hi" # not a comment \\')
    assert [i.name for i in program.code] == ["LET", "HALT"]


def test_empty_source_is_just_halt():
    data = compile_source("# nothing\n")
    assert len(data) == 14 and data == b"SPBC\x01" + bytes(4) + b"\x01\x00\x00\x00\x00"


def test_unicode_strings_round_trip():
    program = compile_program('let greeting "héllo → wörld"\n')
    assert decode(compile_source('let greeting "héllo → wörld"\n')) == program


def test_string_over_the_u16_length_limit_is_a_source_error():
    import pytest
    from sparktrain.core.errors import SourceError
    with pytest.raises(SourceError, match="over the 65535-byte limit"):
        compile_source('model code\nlet a "' + "x" * 65536 + '"\n', "big.spark")


def test_crlf_lines_and_unicode_line_separator_inside_a_string():
    program = compile_program('let a "x\u2028y"\r\nprint a\r\n')
    assert program.strings == ("a", "x\u2028y")
    assert [i.name for i in program.code] == ["LET", "PRINT", "HALT"]
