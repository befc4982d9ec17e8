"""dump_text and dump_json, and `spark dump` / `spark compile` / `spark --help`."""
import json
import subprocess
import sys
from pathlib import Path

from sparkhelp import PROMPT_GUARD_S

from sparktrain.bc.compiler import compile_program, compile_source
from sparktrain.bc.codec import dump_json, dump_text, xrefs
from sparktrain.bc.program import TABLE, Program, layout_code
from sparktrain.cli import main
from sparktrain.core.fsutil import canonical_json

VECTOR = Path(__file__).resolve().parents[2] / "tests" / "vectors" / "spark-train-step.spark"


def vector_program():
    return compile_program(VECTOR.read_text())


def test_text_lists_every_instruction_with_operands():
    text = dump_text(vector_program())
    lines = text.splitlines()
    assert 'code+14  28 07 00 06 00  STEP (0x28) const7 "job-dry-001" const6 "step"' in lines
    assert 'code+0  01 00 00  MODEL (0x01) const0 "code"' in lines
    assert ('code+3  26 05 00 04 00 03 00 02 00 01 00  TRAIN (0x26) const5 '
            '"examples/fixtures/train/dataset.jsonl" const4 "fixture-base" const3 '
            '"out/train/job-dry-001" const2 "spark_distill_cpu" const1 "job"') in lines
    assert 'code+19  27 07 00 08 00  TRAIN_STATUS (0x27) const7 "job-dry-001" const8 "status"' in lines
    assert 'code+24  03 01 00  PRINT (0x03) const1 "job"' in lines
    assert "code+27  00  HALT (0x00)" in lines
    assert '  const7 "job-dry-001" <- code+14 STEP, code+19 TRAIN_STATUS' in lines
    assert text.startswith("SPARK_BC v1  201 bytes  sha256 d08925b5")


def test_json_facts():
    doc = dump_json(vector_program())
    assert doc["header"] == {"magic": "SPBC", "version": 1, "size": 201, "sha256":
                             "d08925b52bf8c840de626c9cfec619d4dbae5a674b94bb8c7c5837eb1ac64551"}
    assert [(s["name"], s["offset"], s["size"]) for s in doc["sections"]] == [
        ("header", 0, 5), ("strings", 5, 135), ("consts", 140, 29), ("code", 169, 32)]
    assert doc["code_base"] == 173
    assert [c["name"] for c in doc["code"]] == ["MODEL", "TRAIN", "STEP", "TRAIN_STATUS",
                                                "PRINT", "HALT"]
    assert doc["code"][2]["values"] == ["job-dry-001", "step"]
    assert doc["xrefs"][1] == {"const": 1, "code_offsets": [3, 24]}
    assert doc["train"] == [{"offset": 3, "dataset": "examples/fixtures/train/dataset.jsonl",
                             "base": "fixture-base", "out": "out/train/job-dry-001",
                             "method": "spark_distill_cpu", "bind": "job", "job": "job-dry-001"}]
    assert json.loads(canonical_json(doc)) == doc


def test_xrefs_list_unused_consts_and_count_an_instruction_once():
    program = Program(1, ("a", "b"), ((0, 0), (0, 1)),
                      layout_code([("LET", (0, 0)), ("HALT", ())]))
    assert xrefs(program) == {0: [0], 1: []}
    assert '  const1 "b" <- (unused)' in dump_text(program).splitlines()


def test_every_opcode_dumps():
    ops = [(op.name, (0,) * op.n_operands) for op in TABLE if op.name != "HALT"] + [("HALT", ())]
    program = Program(1, ("x",), ((0, 0),), layout_code(ops))
    text = dump_text(program)
    for op in TABLE:
        assert f"{op.name} (0x{op.code:02X})" in text
    assert len(dump_json(program)["code"]) == 38


def test_cli_compile_then_dump(tmp_path, capsys):
    out = tmp_path / "sub" / "v.sparkbc"
    assert main(["compile", str(VECTOR), "-o", str(out)]) == 0
    assert out.read_bytes() == compile_source(VECTOR.read_text())
    assert "201 bytes" in capsys.readouterr().out

    assert main(["dump", str(out)]) == 0
    text = capsys.readouterr().out
    for name in ("MODEL", "TRAIN", "STEP", "TRAIN_STATUS", "PRINT", "HALT"):
        assert f"{name} (0x" in text

    assert main(["dump", "--json", str(out)]) == 0
    first = capsys.readouterr().out
    assert json.loads(first)["header"]["size"] == 201
    assert main(["dump", "--json", str(out)]) == 0
    assert capsys.readouterr().out == first                      # deterministic bytes


def test_cli_compile_default_output_name(tmp_path, capsys):
    src = tmp_path / "p.spark"
    src.write_text("model code\n")
    assert main(["compile", str(src)]) == 0
    assert (tmp_path / "p.sparkbc").read_bytes() == compile_source("model code\n")


def test_help_lists_compile_and_dump():
    proc = subprocess.run([sys.executable, "-m", "sparktrain.cli", "--help"],
                          capture_output=True, text=True, timeout=PROMPT_GUARD_S)
    assert proc.returncode == 0
    assert "compile" in proc.stdout and "dump" in proc.stdout


def test_real_process_error_is_one_line(tmp_path):
    bad = tmp_path / "bad.sparkbc"
    bad.write_bytes(b"PK\x03\x04rest")
    proc = subprocess.run([sys.executable, "-m", "sparktrain.cli", "dump", str(bad)],
                          capture_output=True, text=True, timeout=PROMPT_GUARD_S)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"spark: error: {bad}: not a SPARK_BC file (magic b'PK\\x03\\x04' at offset 0); "
        "compile a .spark source with `spark compile` (at byte offset 0)"]
