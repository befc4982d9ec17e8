"""The sweep's grid, its experiment names, its comparison table, its error lines, and how a
stopped run ends."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from sparkhelp import ROOT
from sparktrain.core.errors import SparkError
from sparktrain.eval.experiments import ExpRow
from sparktrain.sweep.grid import (expand, experiments_of, lock_outputs, parse_axis, sweep_table,
                                   point_name, point_record)
from sparktrain.sweep.point import _terminate, reason

PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


def test_grid_is_the_product_first_axis_slowest_like_dvc_queue():
    points = expand([parse_axis("step.lr=0.02,0.05"), parse_axis("step.seed=0,1")], PARAMS)
    assert [p.overrides for p in points] == [
        ("step.lr=0.02", "step.seed=0"), ("step.lr=0.02", "step.seed=1"),
        ("step.lr=0.05", "step.seed=0"), ("step.lr=0.05", "step.seed=1")]
    assert all(p.error is None for p in points)
    assert len({p.name for p in points}) == 4


def test_a_point_keeps_its_name_whatever_the_order_of_the_axes():
    a = expand([parse_axis("step.lr=0.05"), parse_axis("step.seed=1")], PARAMS)[0]
    b = expand([parse_axis("step.seed=1"), parse_axis("step.lr=0.05")], PARAMS)[0]
    assert a.name == b.name == point_name((("step.lr", "0.05"), ("step.seed", "1")))
    assert a.name != point_name((("step.lr", "0.05"), ("step.seed", "0")))
    assert a.name.startswith("sweep-") and len(a.name) == len("sweep-") + 10


def test_an_invalid_value_fails_only_its_point():
    points = expand([parse_axis("step.lr=0.1,-1,fast")], PARAMS)
    assert points[0].error is None
    assert points[1].error == "params: step.lr must be > 0.0, got -1.0"
    assert "step.lr" in points[2].error and "fast" in points[2].error


def test_plus_adds_a_key_params_yaml_lacks():
    [point] = expand([parse_axis("+scales.tiny.seq_len=128")], PARAMS)
    assert point.overrides == ("+scales.tiny.seq_len=128",)
    assert point.error is None


@pytest.mark.parametrize("specs, needle", [
    ([], "nothing to sweep"),
    (["step.lr"], "KEY=VALUE"),
    (["step.lr=0.1,,0.2"], "empty value"),
    (["step.oter=1,2"], "no key step.oter"),
    (["+step.lr=0.1"], "drop the +"),
    (["step.lr=0.1", "step.lr=0.2"], "given twice"),
])
def test_mistakes_of_the_whole_sweep_are_one_error(specs, needle):
    with pytest.raises(SparkError, match=needle):
        expand([parse_axis(s) for s in specs], PARAMS)


LOCK = """
schema: '2.0'
stages:
  step:
    cmd: python -m stages.step
    outs:
    - path: out/w.safetensors
      md5: aaa
    - path: out/ckpt.json
      md5: bbb
  eval:
    outs:
    - path: out/eval.json
      md5: ccc
"""


def test_lock_outputs_lists_every_stage_output():
    assert lock_outputs(LOCK) == {"out/w.safetensors": "aaa", "out/ckpt.json": "bbb",
                                  "out/eval.json": "ccc"}


class _Fake:
    """The experiments reader's interface over one made-up experiment of `baseline`."""

    def __init__(self, name, lr, loss, baseline="base"):
        self.name, self.baseline = name, baseline
        self.files = {"params.yaml": f"job: j\nstep: {{lr: {lr}}}\n".encode(),
                      "out/train/j/eval.json": json.dumps({"loss": loss, "n": 10,
                                                           "mode": "attn"}).encode(),
                      "dvc.lock": LOCK.encode()}

    def rows(self, rev=None):
        base = ExpRow(rev, rev, rev)
        return ([ExpRow(self.name, "abc1234", rev)] if rev == self.baseline else []), [base]

    def read(self, path, rev):
        assert rev == "abc1234"
        return self.files.get(path)


def test_comparison_reads_params_and_metrics_through_the_reader():
    points = expand([parse_axis("step.lr=0.05,-1")], PARAMS)
    found = experiments_of(_Fake(points[0].name, 0.05, 4.25), "base")
    assert experiments_of(_Fake(points[0].name, 0.05, 4.25), "other") == {}
    assert found[points[0].name]["outputs"] == lock_outputs(LOCK)
    done = point_record(points[0], found[points[0].name], {"out/w": "abc"}, None)
    assert done["state"] == "done" and done["params"] == {"step.lr": 0.05}
    assert done["metrics"] == {"out/train/j/eval.json": {"loss": 4.25, "n": 10, "mode": "attn"}}
    failed = point_record(points[1], None, {}, points[1].error)
    assert failed["state"] == "failed" and failed["params"] == {"step.lr": -1}
    lost = point_record(points[0], None, {}, None)
    assert lost["state"] == "failed" and "not found" in lost["error"]

    table = sweep_table({"axes": [["step.lr", ["0.05", "-1"]]], "points": [done, failed]})
    header, rule, row_done, row_failed, error_line = table.splitlines()
    assert header.split() == ["Experiment", "State", "step.lr", "loss", "n"]
    assert row_done.split() == [points[0].name, "done", "0.05", "4.25", "10"]
    assert row_failed.split() == [points[1].name, "failed", "-1", "-", "-"]
    assert error_line == f"{points[1].name} failed: params: step.lr must be > 0.0, got -1.0"


def test_on_a_terminal_the_sweep_table_is_drawn_by_rich():
    a = {"name": "a", "state": "done", "params": {"step.lr": 0.05}, "error": None,
         "metrics": {"e.json": {"loss": 4.25}}, "outputs": {}}
    doc = {"axes": [["step.lr", ["0.05"]]], "points": [a]}
    plain, drawn = sweep_table(doc, tty=False).splitlines(), sweep_table(doc, tty=True).splitlines()
    assert set(plain[1]) == {"-", " "} and set(drawn[1]) == {"\u2500"}
    assert drawn[0] == plain[0] and drawn[2] == plain[2] == "a           done   0.05     4.25"


def test_table_shows_the_weights_hash_when_it_differs():
    a = {"name": "a", "state": "done", "params": {}, "metrics": {}, "error": None,
         "outputs": {"out/eval.json": "1111111111", "out/w.safetensors": "2222222222"}}
    b = dict(a, name="b", outputs={"out/eval.json": "4444444444",
                                   "out/w.safetensors": "3333333333"})
    lines = sweep_table({"axes": [], "points": [a, b]}).splitlines()
    assert lines[0].split() == ["Experiment", "State", "w.safetensors"]
    assert lines[2].split() == ["a", "done", "22222222"]
    same = dict(b, outputs=a["outputs"])
    assert sweep_table({"axes": [], "points": [a, same]}).splitlines()[0].split() == \
        ["Experiment", "State"]


def test_reason_prefers_the_stages_own_error_line():
    output = ("Running stage 'step':\n> python -m stages.step\n"
              "stage step: training failed: loss is nan; previous outputs kept\n"
              "ERROR: failed to reproduce 'step': failed to run: python -m stages.step\n")
    assert reason(output) == "stage step: training failed: loss is nan; previous outputs kept"
    assert reason("Cloning...\nfatal: repository '/x' does not exist\n") == \
        "fatal: repository '/x' does not exist"
    assert reason("") == "(no output)"


def test_a_stopped_run_that_ignores_sigterm_is_killed_not_waited_on_forever():
    """A monitor's stop (spark tune's pruning) never hangs a worker: what still runs after
    the grace period gets SIGKILL, the child under the run too."""
    stubborn = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, "
                "signal.SIG_IGN); subprocess.Popen([sys.executable, '-c', "
                "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "time.sleep(600)']); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", stubborn])
    time.sleep(1.0)   # the child is started
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert tree
    t0 = time.monotonic()
    _terminate(proc, grace_s=1.0)
    assert proc.returncode == -9 and time.monotonic() - t0 < 60
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive


def test_a_stop_waits_for_the_stage_that_outlives_dvc(tmp_path):
    """`dvc exp run` dies at once on SIGTERM while its stage, SIGTERM caught, still puts
    back its outputs: the stop returns only once the stage is done too, so the run that
    follows in the same clone never starts beside it."""
    done = tmp_path / "restored"
    stage = ("import pathlib, signal, sys, time\n"
             "def restore(*_):\n"
             "    time.sleep(1.5)\n"
             f"    pathlib.Path({str(done)!r}).write_text('ok')\n"
             "    sys.exit(143)\n"
             "signal.signal(signal.SIGTERM, restore)\n"
             "time.sleep(600)\n")
    run = ("import subprocess, sys, time; "
           f"subprocess.Popen([sys.executable, '-c', {stage!r}]); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", run])
    time.sleep(1.0)   # the stage is started
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert tree
    _terminate(proc, grace_s=30.0)
    assert proc.returncode == -15   # the run's own end, as Popen saw it
    assert done.read_text() == "ok"
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
