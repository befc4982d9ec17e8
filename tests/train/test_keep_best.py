"""step.keep_best (docs/training.md "Keeping the best held-out weights"): the committed
weights are those of the outer pass with the lowest held-out loss, checkpoint.json names
that pass, the curve keeps every pass, a resumed run ends in the same bytes, the
learned-check judges the kept weights, and a run without a held-out loss is refused."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil

import numpy as np
import pytest

from sparkhelp import ROOT, assert_one_line_error, run_spark
from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.data.source import source_for
from sparktrain.model.config import SCALES
from sparktrain.model.weights import load_weights
from sparktrain.params import Defaults, StepConfig
from sparktrain.train import live
from sparktrain.train.best import best_pass
from sparktrain.train.job import adhoc_job
from sparktrain.train.records import check_learned
from sparktrain.train.runner import run_job

DATASET = ROOT / "data/train/dataset.jsonl"
HELDOUT = ROOT / "data/eval/tiny_heldout.jsonl"
# the default job at the code's rate 0.1: its held-out loss is lowest after pass 2 of 4
# (docs/training.md "The loop (STEP)", the rate table), then the rows are over-fitted
OVERFITS = StepConfig(lr=0.1)
KEEP = dataclasses.replace(OVERFITS, keep_best=True)
OUTPUTS = ("weights.safetensors", "checkpoint.json", "ARTIFACT")


def train(root, step, heldout=HELDOUT, lines=None):
    """`step` on the tiny pairs job, its folder `root`/job (the same relative path, so two
    roots' records may be the same bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    say = lines.append if lines is not None else (lambda line: None)
    with contextlib.chdir(root):
        job = adhoc_job(str(DATASET), "job", None)
        source = source_for(job.dataset, Defaults(), str(heldout) if heldout else None)
        return run_job(job, step, SCALES["tiny"], source, progress=say).checkpoint


def tensors(root):
    return load_weights(root / "job/weights.safetensors")[0]


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[n], b[n]) for n in a)


def interrupt_after(monkeypatch, outer: int):
    """Ctrl-C right after pass `outer` is measured (and its state saved)."""
    orig = live.Watcher.pass_done

    def stop(self, point, *args):
        orig(self, point, *args)
        if point["outer"] == outer:
            raise KeyboardInterrupt
    monkeypatch.setattr(live.Watcher, "pass_done", stop)


def point(outer, loss, heldout):
    return {"outer": outer, "loss": loss, "heldout_loss": heldout, "phase": "after_outer"}


def test_the_kept_pass_is_the_argmin_of_the_held_out_loss_the_first_of_equals():
    curve = [point(0, 5.0, 1.0), point(1, 4.0, 4.4), point(2, 3.0, 4.2), point(3, 2.0, 4.5)]
    assert best_pass(curve) == 2   # the start (pass 0, lowest here) is never a candidate
    curve.append(point(4, 1.5, 4.2))
    assert best_pass(curve) == 2   # a tie keeps the earlier pass
    curve.append(point(5, 1.4, 4.1999))
    assert best_pass(curve) == 5


def test_the_learned_check_judges_the_kept_weights():
    start = point(0, 5.0, 5.0)
    curve = [start, point(1, 5.2, 4.9), point(2, 3.0, 5.1)]
    check_learned(curve, 256)                      # the last pass learned
    with pytest.raises(TrainingFailed, match="loss did not fall"):
        check_learned(curve, 256, kept=1)          # the kept one did not (train loss)
    curve = [start, point(1, 4.0, 5.3), point(2, 3.0, 5.2)]
    check_learned(curve, 256)
    with pytest.raises(TrainingFailed, match="kept pass 2's held-out loss 5.2000 is not below"):
        check_learned(curve, 256, kept=2)          # nor on held-out data
    check_learned([start, point(1, 4.0, 4.8), point(2, 3.0, 5.2)], 256, kept=1)


def test_keep_best_commits_the_best_pass_weights_and_names_the_pass(tmp_path):
    lines = []
    ck = train(tmp_path / "best", KEEP, lines=lines)
    curve = ck["loss_curve"]
    assert [p["outer"] for p in curve] == [0, 1, 2, 3, 4]      # every pass still shown
    held = [p["heldout_loss"] for p in curve[1:]]
    assert ck["kept_pass"] == 1 + int(np.argmin(held)) == 2 and held[-1] > held[1]
    assert ck["keep_best"] is True and ck["loss_after"] == curve[2]["loss"]
    weights, meta = load_weights(tmp_path / "best/job/weights.safetensors")
    assert meta["kept_pass"] == 2 and meta["loss_after"] == curve[2]["loss"]
    # the same run ended after pass 2 (same schedule): its weights are pass 2's
    train(tmp_path / "two", dataclasses.replace(OVERFITS, stop_after_pass=2))
    assert same_tensors(weights, tensors(tmp_path / "two"))
    assert lines[-1] == ("[job] kept the weights of outer 2, the lowest held-out loss "
                         f"({live.losses(curve[2])})")


def test_at_its_default_the_last_pass_is_committed_and_nothing_new_recorded(tmp_path,
                                                                            monkeypatch):
    with monkeypatch.context() as m:   # its resume state holds no best copy
        interrupt_after(m, 3)
        with pytest.raises(KeyboardInterrupt):
            train(tmp_path / "plain", dataclasses.replace(OVERFITS, checkpoint_every=1))
    saved, _ = load_weights(tmp_path / "plain/job/resume.safetensors")
    assert saved and not [n for n in saved if not n.startswith(("param.", "opt."))]
    ck = train(tmp_path / "plain", dataclasses.replace(OVERFITS, checkpoint_every=1))
    assert "keep_best" not in ck and "kept_pass" not in ck
    assert ck["loss_after"] == ck["loss_curve"][-1]["loss"]
    last, meta = load_weights(tmp_path / "plain/job/weights.safetensors")
    assert "kept_pass" not in meta
    train(tmp_path / "best", KEEP)   # the last pass is not the best one here
    assert not same_tensors(last, tensors(tmp_path / "best"))


@pytest.mark.parametrize("stop", [1, 3], ids=["before-the-best", "after-the-best"])
def test_a_run_interrupted_and_resumed_keeps_the_same_best_to_the_byte(tmp_path, monkeypatch,
                                                                         stop):
    step = dataclasses.replace(KEEP, checkpoint_every=1)
    train(tmp_path / "whole", step)
    folder = tmp_path / "b/job"
    with monkeypatch.context() as m:
        interrupt_after(m, stop)
        with pytest.raises(KeyboardInterrupt):
            train(tmp_path / "b", step)
    saved, _ = load_weights(folder / "resume.safetensors")
    best = {n[5:]: a for n, a in saved.items() if n.startswith("best.")}
    assert best and same_tensors(best, {n[6:]: a for n, a in saved.items()
                                        if n.startswith("param.")}) == (stop == 1)
    lines = []
    train(tmp_path / "b", step, lines=lines)
    assert any(f"resumed after outer {stop}" in line for line in lines)
    for name in OUTPUTS:
        assert (folder / name).read_bytes() == (tmp_path / "whole/job" / name).read_bytes(), \
            name
    assert not (folder / "resume.json").exists()


def test_a_state_saved_without_keep_best_is_not_resumed_with_it(tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        interrupt_after(m, 3)
        with pytest.raises(KeyboardInterrupt):
            train(tmp_path, dataclasses.replace(OVERFITS, checkpoint_every=1))
    lines = []
    ck = train(tmp_path, dataclasses.replace(KEEP, checkpoint_every=1), lines=lines)
    assert any("the state of another run; starting afresh" in line for line in lines)
    assert ck["kept_pass"] == 2


def test_keep_best_without_a_held_out_loss_is_refused_in_one_line(tmp_path):
    with pytest.raises(SparkError, match="measures none"):
        train(tmp_path / "in", KEEP, heldout=None)
    assert not (tmp_path / "in/job").exists()
    rc, out, err = run_spark(["train", "--dataset", DATASET, "--out", tmp_path / "o",
                              "--keep-best"])
    assert_one_line_error(rc, err, "step.keep_best", "--heldout")
    assert out == "" and not (tmp_path / "o").exists()


def test_spark_train_keep_best_on_own_text_commits_the_best_pass(tmp_path):
    """The newcomer's case: the own-text recipe over-fits a small folder of notes."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for p in sorted((ROOT / "data/corpus/tiny").glob("*.py"))[:12]:
        shutil.copy(p, notes / f"{p.stem}.txt")
    fast = ["--dataset", notes, "--glob", "*.txt", "--outer", "4", "--inner", "12",
            "--warmup", "1", "--lr", "0.05", "--adam-lr", "0.05", "--batch-size", "8"]
    rc, out, err = run_spark(["train", *fast, "--out", tmp_path / "best", "--keep-best"])
    assert rc == 0, err
    ck = json.loads((tmp_path / "best/checkpoint.json").read_text())
    held = [p["heldout_loss"] for p in ck["loss_curve"][1:]]
    assert ck["kept_pass"] == 1 + int(np.argmin(held)) < 4, held   # it over-fitted
    assert json.loads(out)["loss_after"] == ck["loss_curve"][ck["kept_pass"]]["loss"]
    assert f"kept the weights of outer {ck['kept_pass']}" in err
    rc, _, err = run_spark(["train", *fast, "--out", tmp_path / "cut",
                            "--stop-after-pass", str(ck["kept_pass"])])
    assert rc == 0, err
    assert same_tensors(load_weights(tmp_path / "best/weights.safetensors")[0],
                        load_weights(tmp_path / "cut/weights.safetensors")[0])
