"""Every malformed input named by docs/sparkbc.md and every source mistake: its own
test of the exception type and offset (line:col), and its own CLI test (one
stderr line, exit 2, no traceback, no output file).

The bad files are built here with struct, independently of sparktrain.bc.codec.
"""
import struct

import pytest

from sparktrain.bc.compiler import compile_source
from sparktrain.bc.codec import decode
from sparktrain.cli import main
from sparktrain.core.errors import BytecodeError, SourceError


def u16(n):
    return struct.pack("<H", n)


def u32(n):
    return struct.pack("<I", n)


def sbc(strings=(b"ab",), consts=((0, 0),), code=b"\x01\x00\x00\x00",
        version=1, magic=b"SPBC", tail=b""):
    """A file from raw parts; strings are raw bytes, consts (kind, payload)."""
    out = magic + bytes([version]) + u16(len(strings))
    out += b"".join(u16(len(s)) + s for s in strings)
    out += u16(len(consts)) + b"".join(bytes([k]) + u16(p) for k, p in consts)
    return out + u32(len(code)) + code + tail


GOOD = sbc()                     # MODEL "ab"; HALT
# Offsets in GOOD: magic 0, version 4, nstrings 5, len0 7, bytes0 9, nconsts 11,
# const0 13 (kind) 14 (payload), ncode 16, code 20..23, end 24.
assert len(GOOD) == 24

BYTECODE_CASES = {
    # name: (bytes, offset, message fragment)
    "bad_magic": (b"PK\x03\x04" + GOOD[4:], 0, "not a SPARK_BC file (magic b'PK\\x03\\x04'"),
    "unsupported_version": (sbc(version=2), 4, "unsupported SPARK_BC version 2"),
    "truncated_magic": (b"SPB", 0, "magic"),
    "truncated_version": (b"SPBC", 4, "version"),
    "truncated_string_count": (GOOD[:6], 5, "string count"),
    "truncated_string_length": (GOOD[:8], 7, "length of string 0"),
    "truncated_string_bytes": (GOOD[:10], 9, "bytes of string 0"),
    "invalid_utf8": (sbc(strings=(b"a\xff",)), 10, "not valid UTF-8"),
    "truncated_const_count": (GOOD[:12], 11, "const count"),
    "truncated_const_entry": (GOOD[:15], 13, "const 0 entry"),
    "unknown_const_kind": (sbc(consts=((1, 0),)), 13, "unknown kind 1"),
    "string_index_out_of_range": (sbc(consts=((0, 1),)), 14, "points at string 1"),
    "truncated_code_length": (GOOD[:18], 16, "code length"),
    "truncated_code_bytes": (GOOD[:22], 20, "code section of 4 byte(s)"),
    "unknown_opcode": (sbc(code=b"\x08\x00"), 20, "unknown opcode 0x08"),
    "instruction_cut_off": (sbc(code=b"\x28\x00\x00\x00"), 20, "STEP at code+0 is cut off"),
    "const_index_out_of_range": (sbc(code=b"\x03\x01\x00\x00"), 21, "uses const 1"),
    "missing_halt": (sbc(code=b"\x01\x00\x00"), 23, "does not end with HALT"),
    "empty_code": (sbc(code=b""), 20, "code section is empty"),
    "code_after_halt": (sbc(code=b"\x00\x01\x00\x00"), 21, "3 code byte(s) after HALT"),
    "bytes_after_code": (sbc(tail=b"\x00\x00"), 24, "2 byte(s) after the code section"),
}


@pytest.mark.parametrize("name", sorted(BYTECODE_CASES))
def test_decode_rejects(name):
    data, offset, fragment = BYTECODE_CASES[name]
    with pytest.raises(BytecodeError) as info:
        decode(data)
    assert info.value.offset == offset
    assert fragment in str(info.value)
    assert f"(at byte offset {offset})" in str(info.value)
    assert "\n" not in str(info.value)


def test_good_base_file_decodes():
    program = decode(GOOD)
    assert program.strings == ("ab",) and [i.name for i in program.code] == ["MODEL", "HALT"]


def test_magic_is_checked_before_anything_else():
    with pytest.raises(BytecodeError) as info:
        decode(b"PK\x03")
    assert info.value.offset == 0 and "not a SPARK_BC file" in str(info.value)


def run_cli(argv, capsys):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, out, err, *fragments):
    assert rc == 2
    assert out == ""
    assert err.startswith("spark: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


@pytest.mark.parametrize("name", sorted(BYTECODE_CASES))
def test_cli_dump_rejects(name, tmp_path, capsys):
    data, offset, fragment = BYTECODE_CASES[name]
    path = tmp_path / "bad.sparkbc"
    path.write_bytes(data)
    for argv in (["dump", path], ["dump", "--json", path]):
        rc, out, err = run_cli(argv, capsys)
        assert_one_line_error(rc, out, err, str(path), fragment, f"byte offset {offset}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.sparkbc"]


SOURCE_CASES = {
    # name: (source, line, col, message fragment)
    "unknown_statement": ("model code\n  train x\n", 2, 3, "unknown statement 'train'"),
    "unterminated_string": ('let a "abc\n', 1, 7, "unterminated string"),
    "bad_escape": ('let a "a\\nb"\n', 1, 9, "bad escape \\n"),
    "missing_bind": ('model step "j"\n', 1, 15, "missing `-> bind`"),
    "missing_bind_name": ('model step "j" ->\n', 1, 18, "a bind name"),
    "missing_keyword_out": ('model train dataset "d" base "b" method "m" -> job\n', 1, 45,
                            "missing keyword `out`"),
    "unknown_keyword": ('model train dataset "d" bass "b"\n', 1, 25, "unknown keyword 'bass'"),
    "duplicate_keyword": ('model train out "a" out "b"\n', 1, 21, "`out` given twice"),
    "trailing_junk": ('# hi\n\nprint job extra\n', 3, 11, "trailing junk 'extra'"),
    "unexpected_character": ("print job!\n", 1, 10, "unexpected character '!'"),
    "string_where_name_expected": ('print "job"\n', 1, 7, "expected a NAME to print"),
}


@pytest.mark.parametrize("name", sorted(SOURCE_CASES))
def test_compile_rejects(name):
    text, line, col, fragment = SOURCE_CASES[name]
    with pytest.raises(SourceError) as info:
        compile_source(text, "prog.spark")
    assert (info.value.line, info.value.col) == (line, col)
    assert str(info.value).startswith(f"prog.spark:{line}:{col}: ")
    assert fragment in str(info.value)


@pytest.mark.parametrize("name", sorted(SOURCE_CASES))
def test_cli_compile_rejects(name, tmp_path, capsys):
    text, line, col, fragment = SOURCE_CASES[name]
    src, out_file = tmp_path / "prog.spark", tmp_path / "prog.sparkbc"
    src.write_text(text)
    rc, out, err = run_cli(["compile", src, "-o", out_file], capsys)
    assert_one_line_error(rc, out, err, f"{src}:{line}:{col}: ", fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.spark"]   # no output, no temp


def test_cli_compile_non_utf8_source(tmp_path, capsys):
    src = tmp_path / "prog.spark"
    src.write_bytes(b"model code\nlet a \"\xff\"\n")
    rc, out, err = run_cli(["compile", src, "-o", tmp_path / "o.sparkbc"], capsys)
    assert_one_line_error(rc, out, err, f"{src}:2:8: not UTF-8")
    assert not (tmp_path / "o.sparkbc").exists()


@pytest.mark.parametrize("argv", [["dump"], ["dump", "--json"], ["compile"]])
def test_cli_missing_file(argv, tmp_path, capsys):
    missing = tmp_path / "nope"
    rc, out, err = run_cli(argv + [missing, "-o", tmp_path / "x"] if argv == ["compile"]
                           else argv + [missing], capsys)
    assert_one_line_error(rc, out, err, f"cannot read {missing}")
    assert list(tmp_path.iterdir()) == []


def test_cli_directory_is_unreadable(tmp_path, capsys):
    rc, out, err = run_cli(["dump", tmp_path], capsys)
    assert_one_line_error(rc, out, err, f"cannot read {tmp_path}")


def test_cli_compile_unwritable_output(tmp_path, capsys):
    src = tmp_path / "p.spark"
    src.write_text("model code\n")
    (tmp_path / "blocker").write_text("a file, not a folder")
    rc, out, err = run_cli(["compile", src, "-o", tmp_path / "blocker" / "p.sparkbc"], capsys)
    assert_one_line_error(rc, out, err, "cannot write")
