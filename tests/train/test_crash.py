"""SIGKILL while a run writes its outputs never leaves a weights/checkpoint mismatch."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sparkhelp import SPARK, run_spark
from sparktrain.core.fsutil import sha256_file
from sparktrain.model.weights import load_weights
from sparktrain.train.jobstate import job_state
from sparktrain.train.folder import JobFolder

TRAIN = ["train", "--dataset", "data/train/dataset.jsonl", "--out", "out/j", "--outer", "1",
         "--inner", "2"]


def _consistent(folder):
    """The weights load and hash to what the checkpoint next to them recorded."""
    ckpt = json.loads((folder / "checkpoint.json").read_text())
    load_weights(folder / "weights.safetensors")
    assert sha256_file(folder / "weights.safetensors") == ckpt["weights_sha256"]
    return ckpt


@pytest.fixture
def trained(project):
    rc, out, err = run_spark(TRAIN, cwd=project)
    assert rc == 0, err
    folder = project / "out/j"
    return folder, _consistent(folder)


@pytest.mark.parametrize("point", ["before-journal", "mid-rename"])
def test_kill_inside_the_commit(project, trained, point):
    folder, old = trained
    rc, out, err = run_spark(TRAIN + ["--seed", "7"], cwd=project,
                             env={"SPARK_TEST_CRASH_AT": point})
    assert rc == -signal.SIGKILL
    # Raw files, before any reader repairs anything: still the old, matching pair.
    assert _consistent(folder)["weights_sha256"] == old["weights_sha256"]
    before = sorted((p.name, p.read_bytes()) for p in folder.iterdir() if p.is_file())
    state = job_state(folder)  # a reader reads the journalled set as it will be, changing nothing
    assert state["state"] == "trained" and state["weights_verified"]
    assert sorted((p.name, p.read_bytes()) for p in folder.iterdir() if p.is_file()) == before
    with JobFolder(folder) as writer:  # the next writer (the lock holder) rolls forward or back
        writer.recover()
    assert job_state(folder)["weights_sha256"] == state["weights_sha256"]
    new = _consistent(folder)
    if point == "mid-rename":   # past the point of no return: the new set is complete
        assert new["seed"] == 7 and new["weights_sha256"] != old["weights_sha256"]
    else:                       # before it: the old set stands
        assert new == old
    assert not list(folder.glob(".*.pending")) and not (folder / ".commit").exists()


@pytest.mark.slow
def test_kill_at_random_moments(project, trained):
    folder, _ = trained
    env = dict(os.environ)
    for delay in (0.4, 0.9, 1.4, 1.9):
        p = subprocess.Popen(SPARK + TRAIN[:-4] + ["--outer", "40", "--inner", "4",
                                                   "--seed", str(int(delay * 10))],
                             cwd=project, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        _consistent(folder)
        assert job_state(folder)["state"] == "trained"
        _consistent(folder)
