"""Every interrupted entry says how to resume, in the runner's one message (issue 54):
`spark train`, the DVC step stage and `spark code train` alike (train/runner.py)."""
from __future__ import annotations

import yaml

from relkit import copy_project, ctrl_c_at_third_step, killed_in_pass_two
from sparktrain.data.source import source_for
from sparktrain.model.config import SCALES
from sparktrain.params import Defaults, StepConfig
from sparktrain.train.job import adhoc_job
from sparktrain.train.runner import run_job

SAVED = "interrupted; a resumable state of this run is saved in "
SAME = "; the same command continues it (to the same final bytes)"


def _run(job, step, lines):
    return run_job(job, step, SCALES["tiny"],
                   source_for(job.dataset, Defaults(), None), progress=lines.append)


def test_the_runner_says_how_to_continue_and_the_same_call_does(project, monkeypatch):
    monkeypatch.chdir(project)
    job = adhoc_job("data/train/dataset.jsonl", "out/j", None)
    step = StepConfig(outer=3, inner=2, checkpoint_every=1)
    lines = []
    with monkeypatch.context() as m:
        ctrl_c_at_third_step(m)
        try:
            _run(job, step, lines)
            raise AssertionError("not interrupted")
        except KeyboardInterrupt:
            pass
    assert lines[-1] == f"[j] {SAVED}out/j{SAME}"
    again = []
    assert _run(job, step, again).checkpoint["trained"] is True
    assert again[0].startswith("[j] resumed after outer 1")


def test_without_a_saved_state_it_says_how_to_have_one(project, monkeypatch):
    monkeypatch.chdir(project)
    job = adhoc_job("data/train/dataset.jsonl", "out/j", None)
    lines = []
    with monkeypatch.context() as m:
        ctrl_c_at_third_step(m)
        try:
            _run(job, StepConfig(outer=3, inner=2), lines)
            raise AssertionError("not interrupted")
        except KeyboardInterrupt:
            pass
    assert lines[-1] == ("[j] interrupted; no resumable state was saved (step.checkpoint_every "
                         "is 0); with step.checkpoint_every 1 (--checkpoint-every 1) a state is "
                         "saved after every pass and the same command then continues an "
                         "interrupted run")


def test_spark_train_says_it_before_its_last_line(tmp_path, monkeypatch, capsys):
    capsys.readouterr()
    killed_in_pass_two(copy_project(tmp_path / "p"), monkeypatch,
                       ["--outer", "3", "--inner", "2", "--checkpoint-every", "1"])
    err = capsys.readouterr().err.splitlines()
    assert err[-2:] == [f"[j] {SAVED}out/j{SAME}", "spark: interrupted"], err


def test_the_step_stage_says_it_too(project, monkeypatch, capsys):
    """The DVC stage, interrupted with a saved state: the runner's line, then the stage's."""
    import stages.decode_bc as decode_bc
    import stages.step as step_stage
    from stages.common import run

    monkeypatch.chdir(project)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["step"].update(outer=3, inner=2, checkpoint_every=1)
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    assert run("decode_bc", decode_bc.decode_bc) == 0
    capsys.readouterr()
    with monkeypatch.context() as m:
        ctrl_c_at_third_step(m)
        assert run("step", step_stage.step) == 130
    err = capsys.readouterr().err.splitlines()
    folder = f"out/train/{params['job']}"
    assert err[-2] == f"[{params['job']}] {SAVED}{folder}{SAME}", err
    assert err[-1].startswith("stage step: interrupted by SIGINT"), err
    assert run("step", step_stage.step) == 0                    # the same command continues
    assert "resumed after outer 1" in capsys.readouterr().err
