"""Bounded work for any input, and one line + exit 2 for every bad one."""
from __future__ import annotations

import json
import os
import struct

import pytest

from relkit import FAST, TRAIN, trained  # noqa: F401  (fixture)
from sparkhelp import PROMPT_GUARD_S, assert_one_line_error, run_spark
from sparktrain.bc.program import MAX_INSTRUCTIONS
from sparktrain.bc.codec import encode
from sparktrain.bc.compiler import compile_program


def _program(n_model: int, alias: str = "m") -> bytes:
    """A SPARK_BC file of `n_model` MODEL instructions then HALT, built by hand."""
    s = alias.encode()
    strings = struct.pack("<H", 1) + struct.pack("<H", len(s)) + s
    consts = struct.pack("<H", 1) + bytes([0]) + struct.pack("<H", 0)
    code = bytes([0x01, 0, 0]) * n_model + bytes([0x00])
    return b"SPBC\x01" + strings + consts + struct.pack("<I", len(code)) + code


def test_hand_built_program_matches_the_compiler():
    assert _program(3) == encode(compile_program("model m\n" * 3))


@pytest.mark.parametrize("argv", [
    ["run", "/dev/zero"], ["dump", "/dev/zero"], ["compile", "/dev/zero"],
    ["eval", "--data", "/dev/zero", "--weights", "W"],
    ["generate", "--weights", "/dev/zero", "hi"],
    ["train", "--dataset", "/dev/zero", "--out", "out/z"] + FAST,
])
def test_devices_are_refused_before_reading(trained, argv):
    project, weights = trained
    argv = [str(weights) if a == "W" else a for a in argv]
    rc, _, err = run_spark(argv, cwd=project, timeout=PROMPT_GUARD_S)
    assert_one_line_error(rc, err, "/dev/zero", "not a regular file")


@pytest.mark.parametrize("kind", ["run", "dump", "eval", "generate", "train"])
def test_a_fifo_never_hangs(trained, tmp_path, kind):
    project, weights = trained
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = {"run": ["run", fifo], "dump": ["dump", fifo],
            "eval": ["eval", "--data", fifo, "--weights", weights],
            "generate": ["generate", "--weights", fifo, "hi"],
            "train": ["train", "--dataset", fifo, "--out", "out/f"]}[kind]
    rc, _, err = run_spark(argv, cwd=project, timeout=PROMPT_GUARD_S)
    assert_one_line_error(rc, err, "a FIFO")


def test_size_caps_are_checked_before_reading_and_configurable(trained, tmp_path):
    project, _ = trained
    big = tmp_path / "big.jsonl"
    row = json.dumps({"prompt": "a", "completion": "b"}) + "\n"
    big.write_text(row * 40000)                      # ~1.3 MB
    rc, _, err = run_spark(TRAIN[:1] + ["--dataset", big, "--out", "out/b"] + FAST,
                           cwd=project, env={"SPARK_MAX_DATASET_MB": "1"})
    assert_one_line_error(rc, err, "above the 1,048,576-byte limit", "SPARK_MAX_DATASET_MB")
    rc, _, err = run_spark(["train", "--dataset", big, "--out", "out/b"] + FAST, cwd=project,
                           env={"SPARK_MAX_DATASET_MB": "lots"})
    assert_one_line_error(rc, err, "SPARK_MAX_DATASET_MB")
    prog = tmp_path / "big.sparkbc"
    with open(prog, "wb") as f:
        f.truncate(17 << 20)
    rc, _, err = run_spark(["dump", prog], cwd=project)
    assert_one_line_error(rc, err, "above the 16,777,216-byte limit")


def test_too_many_instructions_is_one_line_for_dump_run_and_compile(trained, tmp_path):
    project, _ = trained
    prog = tmp_path / "long.sparkbc"
    prog.write_bytes(_program(MAX_INSTRUCTIONS))
    for argv in (["dump", "--json", prog], ["run", prog]):
        rc, _, err = run_spark(argv, cwd=project)
        assert_one_line_error(rc, err, f"more than {MAX_INSTRUCTIONS} instructions")
    prog.write_bytes(_program(MAX_INSTRUCTIONS - 1))       # the most that decodes
    rc, out, err = run_spark(["dump", "--json", prog], cwd=project)
    assert rc == 0, err
    assert len(json.loads(out)["code"]) == MAX_INSTRUCTIONS
    src = tmp_path / "long.spark"
    src.write_text("model m\n" * MAX_INSTRUCTIONS)
    rc, _, err = run_spark(["compile", src], cwd=project)
    assert_one_line_error(rc, err, "instructions")


def test_a_listing_that_would_dwarf_the_file_is_refused(trained, tmp_path):
    """60 KB string used by 2,000 instructions: a 66 KB file asking for 120 MB of output."""
    project, _ = trained
    prog = tmp_path / "wide.sparkbc"
    prog.write_bytes(_program(2000, alias="x" * 60000))
    for argv in (["dump", prog], ["dump", "--json", prog]):
        rc, _, err = run_spark(argv, cwd=project)
        assert_one_line_error(rc, err, "listing", "not printed")
    src = tmp_path / "loud.spark"
    src.write_text(f'let s "{"y" * 60000}"\n' + "print s\n" * 2000)
    rc, _, err = run_spark(["compile", src, "-o", tmp_path / "loud.sparkbc"], cwd=project)
    assert rc == 0, err
    rc, out, err = run_spark(["run", tmp_path / "loud.sparkbc"], cwd=project)
    assert_one_line_error(rc, err, "would print over")
    assert out == ""


ROW = '{"prompt": "a", "completion": "b"}'


@pytest.mark.parametrize("row, needle", [
    ('{"prompt": "a", "completion": "b", "n": ' + "9" * 5000 + "}", ":2: not JSON"),
    ('{"prompt": ' + "[" * 100000 + "]" * 100000 + "}", ":2: JSON nested too deeply"),
    ('{"prompt": "\\ud800", "completion": "b"}', ":2: the prompt holds a lone surrogate"),
    ('{"messages": [{"role": "user", "content": "\\udfff"}, '
     '{"role": "assistant", "content": "x"}]}', "lone surrogate"),
    ('{"prompt": "' + "a" * (1 << 20) + '", "completion": "b"}', ":2: row is longer than"),
])
def test_bad_rows_are_one_line_naming_the_line(trained, tmp_path, row, needle):
    project, weights = trained
    data = tmp_path / "d.jsonl"
    data.write_text(ROW + "\n" + row + "\n")
    rc, _, err = run_spark(["train", "--dataset", data, "--out", "out/r"] + FAST, cwd=project)
    assert_one_line_error(rc, err, needle)
    rc, _, err = run_spark(["eval", "--data", data, "--weights", weights], cwd=project)
    assert_one_line_error(rc, err, needle)


@pytest.mark.parametrize("argv, needle", [
    (["train", "--dataset", "data/train/dataset.jsonl", "--out", "afile"], "afile"),
    (["train", "--dataset", "data/train/dataset.jsonl", "--out", "/proc/self/x"], "/proc/self/x"),
    (["train", "--dataset", "data/train/dataset.jsonl", "--out", "out/" + "a" * 300],
     "at most 255"),
    (["eval", "--data", "data/eval/tiny_heldout.jsonl", "--weights", "W", "-o", "out"],
     "it is a folder"),
    (["make-data", "--out-dir", "afile"], "is not a folder"),
    (["generate", "--weights", "W", "--seed", "-1", "--temperature", "1", "hi"], "--seed"),
    (["generate", "--weights", "W", b"\xff".decode("utf-8", "surrogateescape")], "UTF-8"),
])
def test_one_line_exit_2_before_any_work(trained, argv, needle):
    project, weights = trained
    (project / "afile").write_text("")
    argv = [str(weights) if a == "W" else a for a in argv]
    rc, out, err = run_spark(argv, cwd=project)
    assert_one_line_error(rc, err, needle)
    assert "outer" not in err   # refused before training started


def test_program_out_paths_too_long_or_too_deep(trained, tmp_path):
    project, _ = trained
    for out in ("out/" + "b" * 300 + "/job", "out/" + "d/" * 2000 + "job"):
        src = tmp_path / "p.spark"
        src.write_text(f'model train dataset "data/train/dataset.jsonl" base "fresh" '
                       f'out "{out}" method "spark_distill_cpu" -> t\n')
        rc, _, err = run_spark(["compile", src, "-o", tmp_path / "p.sparkbc"], cwd=project)
        assert rc == 0, err
        rc, _, err = run_spark(["run", tmp_path / "p.sparkbc"], cwd=project)
        assert_one_line_error(rc, err, "too long")


def test_max_new_is_capped_and_says_so(trained):
    project, weights = trained
    rc, out, err = run_spark(["generate", "--weights", weights, "--max-new", "1000000000", "hi"],
                             cwd=project, timeout=PROMPT_GUARD_S)
    assert rc == 0 and "capped at 4096" in err
    assert len(out.encode()) <= 4096 * 3 + 1


def test_plot_refuses_non_finite_losses(tmp_path):
    ckpt = tmp_path / "c.json"
    ckpt.write_text('{"loss_curve": [{"outer": 0, "loss": NaN}]}')
    rc, _, err = run_spark(["plot", "--checkpoint", ckpt, "-o", tmp_path / "p.png"])
    assert_one_line_error(rc, err, "finite")
