"""A run is claimed only when it learned something; failures keep the last good set."""
from __future__ import annotations

import math

import pytest

from relkit import FAST, TRAIN, snapshot, trained  # noqa: F401  (fixture)
from sparkhelp import assert_one_line_error, run_spark
from sparktrain.core.errors import TrainingFailed
from sparktrain.train.records import check_learned

LN256 = math.log(256)


def _curve(*losses):
    return [{"outer": k, "loss": v} for k, v in enumerate(losses)]


def test_check_learned_accepts_a_real_fall():
    check_learned(_curve(5.57, 4.0, 3.1), 256)


@pytest.mark.parametrize("losses, needle", [
    ((5.576, 5.56, LN256), "uniform"),          # the lr=1e9 collapse
    ((5.576, LN256 - 0.001), "uniform"),        # within the margin of uniform
    ((5.0, 11.0, 4.0), "blew up"),              # far above the start at one pass
    ((3.0, 3.0), "did not fall"),
])
def test_check_learned_refuses(losses, needle):
    with pytest.raises(TrainingFailed, match=needle):
        check_learned(_curve(*losses), 256)


def test_blown_up_run_exits_1_and_keeps_the_good_set(trained):
    project, _ = trained
    folder = project / "out/j"
    good = snapshot(folder)
    rc, out, err = run_spark(TRAIN + ["--out", "out/j", "--lr", "1e9"], cwd=project)
    assert rc == 1, err
    assert "uniform" in err and "trained" not in out
    after = snapshot(folder)
    for name in ("weights.safetensors", "checkpoint.json", "ARTIFACT"):
        assert after[name] == good[name]
    rc, out, _ = run_spark(["status", "out/j"], cwd=project)
    assert rc == 0 and '"state": "failed"' in out and "uniform" in out


@pytest.mark.parametrize("flag, value", [("--clip", "nan"), ("--lr", "inf"), ("--clip", "inf"),
                                         ("--lr", "nan")])
def test_non_finite_knobs_fail_before_training(trained, flag, value):
    project, _ = trained
    good = snapshot(project / "out/j")
    rc, _, err = run_spark(TRAIN + ["--out", "out/j", flag, value] + FAST, cwd=project)
    assert_one_line_error(rc, err, flag[2:], "finite")
    assert snapshot(project / "out/j") == good
