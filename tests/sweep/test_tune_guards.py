"""`spark tune` under bad input and faults, without a cluster: every value checked
before a study is made or changed (objective, seed, workers, an in-memory storage), a
stored space another tool wrote refused in one line, a full database named as such, two
drivers creating one study at once, stale trials queued again once however many processes
see them, and refused trials that do not count towards
--trials (docs/tuning.md "Tuning")."""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")

import sqlalchemy  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from sparktrain.cli import check_cluster_flags  # noqa: E402
from sparktrain.cli.tune import seed_arg  # noqa: E402
from sparktrain.core.errors import SparkError  # noqa: E402
from sparktrain.core.metric_keys import HEADLINE_KEYS  # noqa: E402
from sparktrain.sweep import study as studies, tune  # noqa: E402
from sparktrain.sweep.space import describe, distributions, parse_space  # noqa: E402

PARAMS = {"job": "job-x", "step": {"lr": 0.03, "outer": 4, "warmup": 0, "optimizer": "sgd"}}
DONE = {"state": "done", "error": None, "seconds": 1.0,
        "result": {"objective": 2.0, "metric": "loss"}}


@dataclasses.dataclass(eq=False)
class _Ended:
    """A cluster's Future that has ended with `record`."""
    record: dict

    def done(self) -> bool:
        return True

    def result(self) -> dict:
        return self.record


def _study(tmp_path, trials=4, seed=0, space=("step.lr=log:0.001..0.1",)):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    dims = parse_space(list(space), PARAMS)
    return url, dims, studies.open_study(studies.open_storage(url), "s", dims, "auto",
                                         trials, seed, False)


def test_refused_trials_do_not_count_towards_trials(tmp_path, monkeypatch):
    url, dims, study = _study(tmp_path)
    refusals = iter(["refused", "refused", None, "refused", None, None, None])
    monkeypatch.setattr(tune, "invalid", lambda params, axes, values: next(refusals))
    monkeypatch.setattr(tune, "submit_point", lambda *a: _Ended(DONE))
    ticks = []
    assert tune.run_study(None, PARAMS, study, url, dims, 4, "auto", False, None, 1, None,
                          lambda line: None, ticks.append) is True
    assert ticks == ["failed", "failed", "done", "failed", "done", "done", "done"]
    states = [t.state for t in study.get_trials()]
    assert states.count(TrialState.COMPLETE) == 4 and states.count(TrialState.FAIL) == 3


def test_one_trial_refused_every_time_stops_with_its_line(tmp_path, monkeypatch):
    url, dims, study = _study(tmp_path, trials=1)
    monkeypatch.setattr(tune, "invalid", lambda params, axes, values: "refused")
    lines = []
    assert tune.run_study(None, PARAMS, study, url, dims, 1, "auto", False, None, 1, None,
                          lines.append) is False
    assert len(study.get_trials()) == tune.FAILED_IN_ROW
    assert lines[-1].startswith(f"stopped: {tune.FAILED_IN_ROW} trials in a row failed")


def test_an_objective_typo_is_refused_with_the_closest():
    with pytest.raises(SparkError, match=r"--objective 'bpbb': spark tune minimises one of "
                                         r"auto, .*; did you mean 'bpb'\?"):
        studies.check_objective("bpbb")
    assert set(studies.OBJECTIVES) - {studies.AUTO} <= set(HEADLINE_KEYS)
    for objective in studies.OBJECTIVES:
        assert studies.check_objective(objective) == objective


@pytest.mark.parametrize("text", ["-1", "4294967296", "1e3", "x"])
def test_a_seed_numpy_refuses_is_refused_by_the_flag(text):
    with pytest.raises(argparse.ArgumentTypeError):
        seed_arg(text)


def test_a_study_begun_at_the_largest_seed_resumes(tmp_path):
    largest = seed_arg("4294967295")
    url, dims, study = _study(tmp_path, seed=largest)
    study.tell(study.ask(distributions(dims)), 1.0)
    again = studies.open_study(studies.open_storage(url), "s", dims, "auto", 4, largest, False)
    assert again.ask(distributions(dims)).number == 1   # its sampler's seed wrapped to 0


def test_workers_past_the_machine_are_refused():
    with pytest.raises(SparkError, match=r"--workers 5000: this machine has \d+ usable core"):
        check_cluster_flags(argparse.Namespace(scheduler=None, workers=5000))
    check_cluster_flags(argparse.Namespace(scheduler=None, workers=2))


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:",
                                 "sqlite:///file:x?mode=memory&uri=true"])
def test_a_storage_in_memory_is_refused(url):
    with pytest.raises(SparkError, match="an SQLite database in memory, which the workers "
                                         "cannot reach"):
        studies.check_storage(url, local=True)


def test_a_relative_sqlite_path_is_the_same_file_for_every_worker(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert studies.check_storage("sqlite:///out/t.db", local=True) == \
        f"sqlite:///{tmp_path / 'out/t.db'}"
    assert studies.check_storage("sqlite:///out/t.db", local=False) == "sqlite:///out/t.db"
    assert studies.check_storage("postgresql://h/db", local=True) == "postgresql://h/db"


@pytest.mark.parametrize("stored", [
    '[["step.lr","log",0.001]]', '[["step.lr","log",0.001,0.1,[],false,"x"]]', "5", 5,
    "[]", '[[1,"log",1,2,[],false]]', '[["k","choice",null,null,[1,2],false]]',
    '[["k","log","a","b",[],false]]', '[["k","cube",1,2,[],false]]', "not json", None])
def test_a_stored_space_another_tool_wrote_is_one_line(tmp_path, stored):
    url, dims, study = _study(tmp_path)
    study.set_user_attr(studies.SPACE_ATTR, stored)
    with pytest.raises(SparkError) as err:
        studies.open_study(studies.open_storage(url), "s", dims, "auto", 4, 0, False)
    assert str(err.value).startswith("the study's stored search space is not one spark tune "
                                     "wrote (")
    assert "\n" not in str(err.value)


def test_a_space_spark_tune_wrote_is_described():
    assert describe('[["step.lr","log",0.001,0.1,[],false]]') == "-S step.lr=log:0.001..0.1"


def test_a_full_database_is_named_as_such(tmp_path):
    url, dims, study = _study(tmp_path)
    engine = study._storage._backend.engine

    @sqlalchemy.event.listens_for(engine, "connect")
    def full(connection, record):   # SQLite's own "disk" ends at the pages it has now
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count={pages}")

    engine.dispose()
    with pytest.raises(SparkError) as err, studies.storage_errors(url):
        for n in range(1000):
            study.set_user_attr(f"k{n}", "x" * 5000)
    assert str(err.value) == (f"the study storage {url} failed: database or disk is full; "
                              f"the study keeps its finished trials: fix that and run the "
                              f"same command again")


CREATE = """
import sys, time
from sparktrain.sweep import study as studies
from sparktrain.sweep.space import parse_space
url, start = sys.argv[1], float(sys.argv[2])
dims = parse_space(["step.lr=log:0.001..0.1"], {"step": {"lr": 0.1}})
time.sleep(max(0.0, start - time.time()))
with studies.creating(url):
    studies.open_study(studies.open_storage(url), "s", dims, "auto", 4, 0, True)
"""


def test_two_drivers_creating_one_study_at_once_share_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    start = str(time.time() + 5)   # both past their imports, then at the same instant
    procs = [subprocess.Popen([sys.executable, "-c", CREATE, url, start],
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], errors
    study = optuna.load_study(study_name="s", storage=studies.open_storage(url))
    assert study.user_attrs[studies.SPACE_ATTR].startswith('[["step.lr","log"')


FAIL_STALE = """
import sys, time
import optuna
from optuna.storages import fail_stale_trials
from sparktrain.sweep import study as studies
url, start = sys.argv[1], float(sys.argv[2])
storage = studies.open_storage(url)
storage.grace_period = 1   # the trials' heartbeats are older than that at `start`
study = optuna.load_study(study_name="s", storage=storage)
time.sleep(max(0.0, start - time.time()))
fail_stale_trials(study)
"""


def test_stale_trials_seen_by_many_processes_at_once_are_queued_again_once(tmp_path):
    """A killed driver's running trials turn stale; the next driver and every worker's
    monitor look for stale trials, and whichever fails one first queues it again: one
    copy each, however many look at the same instant (with Optuna's read-then-write on
    SQLite, 6 processes made up to 6 copies of one trial)."""
    url, _, study = _study(tmp_path, trials=20)
    stale = [study.ask() for _ in range(20)]
    for trial in stale:
        study._storage.record_heartbeat(trial._trial_id)
    start = str(time.time() + 5)   # all past their imports, then at the same instant
    procs = [subprocess.Popen([sys.executable, "-c", FAIL_STALE, url, start],
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6, errors
    trials = optuna.load_study(study_name="s", storage=studies.open_storage(url)).get_trials()
    assert [trials[t.number].state for t in stale] == [TrialState.FAIL] * 20
    queued = sorted(t.system_attrs["failed_trial"] for t in trials
                    if "failed_trial" in t.system_attrs)
    assert queued == [t.number for t in stale]
