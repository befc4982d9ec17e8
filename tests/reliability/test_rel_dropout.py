"""step.dropout through whole runs (docs/training.md "Reading the data more than once"): off, the bytes of a run
without the knob and no record of it; on, recorded, in training only (the curve's scores
never drop), refused without the attention model, and a run killed mid-way resumes to the
bytes of the unbroken one."""
from __future__ import annotations

import json

from relkit import TRAIN, copy_project, killed_in_pass_two, train_j
from sparkhelp import assert_one_line_error, run_spark

KNOBS = ["--outer", "3", "--inner", "2", "--checkpoint-every", "1", "--optimizer", "adamw",
         "--lr", "0.01", "--heldout", "data/eval/tiny_heldout.jsonl"]
ON = KNOBS + ["--dropout", "0.1"]
FILES = ("weights.safetensors", "checkpoint.json")


def _job(root, knobs):
    job = train_j(copy_project(root), knobs) / "out/j"
    return job, json.loads((job / "checkpoint.json").read_text())


def test_off_is_the_run_without_it_and_on_is_recorded_and_trains_only(tmp_path):
    plain, plain_ck = _job(tmp_path / "a", KNOBS)
    off, off_ck = _job(tmp_path / "b", KNOBS + ["--dropout", "0"])
    on, on_ck = _job(tmp_path / "c", ON)
    assert "dropout" not in plain_ck and on_ck["dropout"] == 0.1
    for name in FILES:
        assert (off / name).read_bytes() == (plain / name).read_bytes(), name
    assert (on / "weights.safetensors").read_bytes() != (plain / "weights.safetensors").read_bytes()
    # the start point scores the same weights without dropout; the trained ones differ
    assert on_ck["loss_curve"][0] == plain_ck["loss_curve"][0]
    assert on_ck["loss_curve"][-1]["loss"] != plain_ck["loss_curve"][-1]["loss"]


def test_a_run_killed_mid_way_resumes_to_the_same_bytes_with_dropout(tmp_path, monkeypatch):
    whole, _ = _job(tmp_path / "whole", ON)
    root = copy_project(tmp_path / "p")
    job = killed_in_pass_two(root, monkeypatch, ON)
    rc, _, err = run_spark(TRAIN + ["--out", "out/j"] + ON, cwd=root)
    assert rc == 0 and "resumed after outer 1" in err, err
    for name in FILES:
        assert (job / name).read_bytes() == (whole / name).read_bytes(), name


def test_the_mean_pool_model_refuses_it_in_one_line(tmp_path):
    root = copy_project(tmp_path / "p")
    rc, _, err = run_spark(TRAIN + ["--out", "out/j", "--no-train-attn", "--dropout", "0.1"],
                           cwd=root)
    assert_one_line_error(rc, err, "step.dropout needs the attention model")
    assert not (root / "out/j/weights.safetensors").exists()
