"""One owner per run and per folder (train/runner.py, train/folder.py; docs/training.md
"One run, one owner"): the folder is locked once per run, by its JobFolder, held while the
loop runs and released after; nothing about a folder is kept process-wide."""
from __future__ import annotations

import fcntl

import pytest

import sparktrain.train.folder as folder_module
import sparktrain.train.loop as loop
from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.data.source import source_for
from sparktrain.model.config import SCALES
from sparktrain.params import Defaults, StepConfig
from sparktrain.train.folder import JobFolder
from sparktrain.train.job import adhoc_job
from sparktrain.train.outputs import held_elsewhere
from sparktrain.train.runner import run_job

QUICK = StepConfig(outer=1, inner=2)


def test_a_second_object_on_a_held_folder_is_refused_even_in_the_same_process(tmp_path):
    first = JobFolder(tmp_path / "j").lock()
    try:
        with pytest.raises(SparkError, match="in use by another spark process"):
            JobFolder(tmp_path / "j").lock()    # no registry lets a second writer through
        assert first.lock() is first and first.locked   # its own lock: taken once
    finally:
        first.unlock()
    assert not first.locked and not held_elsewhere(tmp_path / "j")
    with JobFolder(tmp_path / "j") as again:            # released: the next writer gets it
        assert again.locked


@pytest.mark.parametrize("error, kept", [(SparkError("refused"), False),
                                         (OSError(28, "No space left on device"), False),
                                         (TrainingFailed("loss did not fall"), True)])
def test_a_folder_it_made_goes_whole_unless_training_ran(tmp_path, error, kept):
    folder = JobFolder(tmp_path / "new" / "deeper" / "j")
    with pytest.raises(SparkError):
        with folder.writes():
            folder.lock()
            raise error
    assert (tmp_path / "new").exists() == kept
    folder.unlock()


def test_the_runner_locks_once_holds_the_folder_while_training_and_releases_it(
        project, monkeypatch):
    monkeypatch.chdir(project)
    job = adhoc_job("data/train/dataset.jsonl", "out/j", None)
    exclusive, held = [], []
    real_flock, real_update = fcntl.flock, loop.apply_update

    def counted(fd, op):
        if op & fcntl.LOCK_EX:
            exclusive.append(fd)
        return real_flock(fd, op)

    def update(*a):
        held.append(held_elsewhere("out/j"))   # another opener sees the run's lock
        return real_update(*a)
    monkeypatch.setattr(folder_module.fcntl, "flock", counted)
    monkeypatch.setattr(loop, "apply_update", update)
    result = run_job(job, QUICK, SCALES["tiny"], source_for(job.dataset, Defaults()),
                     progress=lambda line: None)
    assert result.checkpoint["trained"] is True
    assert len(exclusive) == 1                 # one lock for the whole run
    assert held == [True, True]
    assert not held_elsewhere("out/j")         # released when the run ended


def test_the_loop_refuses_a_folder_nobody_locked(project, monkeypatch):
    monkeypatch.chdir(project)
    job = adhoc_job("data/train/dataset.jsonl", "out/j", None)
    with pytest.raises(SparkError, match="is not locked by this run"):
        loop.train_and_commit(job, QUICK, SCALES["tiny"], source_for(job.dataset, Defaults()),
                              folder=JobFolder("out/j"), progress=lambda line: None)
