"""`spark tune`'s search space, its study and its trial monitor, without a cluster: the
-S syntax and its one-line refusals, a study that holds another space, a storage that
cannot be opened, and the monitor reporting a run's per-pass held-out curve to Optuna
and stopping a trial the pruner rules out."""
from __future__ import annotations

import dataclasses

import pytest

optuna = pytest.importorskip("optuna")

from optuna.distributions import (CategoricalDistribution, FloatDistribution,  # noqa: E402
                                  IntDistribution)
from optuna.storages import RetryHeartbeatStaleTrialCallback, fail_stale_trials  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from sparktrain.core.errors import SparkError  # noqa: E402
from sparktrain.sweep import study as studies, tune  # noqa: E402
from sparktrain.sweep.monitor import TrialMonitor  # noqa: E402
from sparktrain.sweep.space import (describe, distributions, parse_dimension,  # noqa: E402
                                    parse_space, signature)

PARAMS = {"job": "job-x", "step": {"lr": 0.03, "outer": 4, "warmup": 0, "optimizer": "sgd"}}


def test_each_kind_of_range_and_list():
    lr, warm, opt, clip = parse_space(["step.lr=log:0.001..0.1", "step.warmup=int:0..400",
                                       "step.optimizer=adamw,muon", "+step.clip=0.5..2"],
                                      PARAMS)
    assert (lr.kind, lr.low, lr.high) == ("log", 0.001, 0.1)
    assert (warm.kind, warm.low, warm.high) == ("int", 0, 400)
    assert (opt.kind, opt.choices) == ("choice", ("adamw", "muon"))
    assert (clip.kind, clip.add) == ("float", True)
    dists = distributions([lr, warm, opt, clip])
    assert dists["step.lr"] == FloatDistribution(0.001, 0.1, log=True)
    assert dists["step.warmup"] == IntDistribution(0, 400)
    assert dists["step.optimizer"] == CategoricalDistribution(("adamw", "muon"))
    assert lr.override(0.0125) == "step.lr=0.0125" and clip.override(1.5) == "+step.clip=1.5"
    assert describe(signature([lr, warm, opt, clip])) == (
        "-S step.lr=log:0.001..0.1 -S step.warmup=int:0..400 -S step.optimizer=adamw,muon "
        "-S +step.clip=0.5..2.0")


@pytest.mark.parametrize("spec, needle", [
    ("step.lr=log:0.1..0.1", "the range 0.1..0.1 is empty"),
    ("step.lr=0.5..0.1", "the range 0.5..0.1 is inverted"),
    ("step.lr=log:a..0.1", "'a' is not a number (log range)"),
    ("step.warmup=int:0..1.5", "'1.5' is not an integer (int range)"),
    ("step.lr=log:0..0.1", "log: needs LOW > 0"),
    ("step.lr=log:0.1", "log: takes a range LOW..HIGH"),
    ("step.lr=inf..1", "not a finite number"),
    ("step.optimizer=adamw,,muon", "an empty value in the list"),
    ("step.optimizer=adamw,adamw", "a value is listed twice"),
    ("step.lr", "-S expects KEY=RANGE"),
])
def test_a_bad_range_is_one_line(spec, needle):
    with pytest.raises(SparkError) as err:
        parse_dimension(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_or_repeated_keys_are_refused_with_the_closest_name():
    with pytest.raises(SparkError, match=r"no key step.lrr; did you mean 'step.lr'\?"):
        parse_space(["step.lrr=0.1..0.2"], PARAMS)
    with pytest.raises(SparkError, match="given twice"):
        parse_space(["step.lr=0.1..0.2", "step.lr=0.3..0.4"], PARAMS)
    with pytest.raises(SparkError, match="nothing to tune"):
        parse_space([], PARAMS)


def test_a_study_keeps_its_space(tmp_path):
    storage = studies.open_storage(f"sqlite:///{tmp_path / 'tune.db'}")
    dims = parse_space(["step.lr=log:0.001..0.1"], PARAMS)
    studies.open_study(storage, "s", dims, "auto", 8, 0, True)
    again = studies.open_study(storage, "s", dims, "auto", 8, 0, True)   # resuming is fine
    assert again.user_attrs[studies.SPACE_ATTR] == signature(dims)
    other = parse_space(["step.lr=log:0.001..0.2"], PARAMS)
    with pytest.raises(SparkError, match=r"holds another search space \(-S "
                                         r"step.lr=log:0.001..0.1\)"):
        studies.open_study(storage, "s", other, "auto", 8, 0, True)
    with pytest.raises(SparkError, match="minimises 'auto', not 'loss'"):
        studies.open_study(storage, "s", dims, "loss", 8, 0, True)


@pytest.mark.parametrize("url", ["sqlite:////nonexistent-root-dir/x/../../proc/1/x.db",
                                 "nosuchdb://host/db", "not a url"])
def test_a_storage_that_cannot_be_opened_is_one_line(url):
    with pytest.raises(SparkError) as err:
        studies.open_storage(url)
    assert str(err.value).startswith(f"cannot open the study storage {url}: ")
    assert "\n" not in str(err.value)


def test_study_names_are_safe_experiment_names():
    assert studies.check_study_name("lr-2") == "lr-2"
    with pytest.raises(SparkError, match="a study name is letters"):
        studies.check_study_name("a b")


def _clone_with_curve(path, values, pending=True, outer=4):
    """A fake clone whose run of `outer` passes has written `values` (after the start
    row) so far."""
    (path / "params.yaml").parent.mkdir(parents=True, exist_ok=True)
    (path / "params.yaml").write_text(f"job: job-x\nstep: {{outer: {outer}}}\n")
    base = path / "out/train/job-x" / (".live-run" if pending else "")
    series = base / "dvclive/plots/metrics/heldout_loss.tsv"
    series.parent.mkdir(parents=True, exist_ok=True)
    series.write_text("step\theldout_loss\n" + "".join(
        f"{i}\t{v}\n" for i, v in enumerate([9.0, *values])))
    return path


def test_the_monitor_reports_each_pass_and_stops_a_hopeless_trial(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    dims = parse_space(["step.lr=log:0.001..0.1"], PARAMS)
    study = studies.open_study(studies.open_storage(url), "s", dims, "auto", 8, 0, True)
    dists = distributions(dims)
    for good in range(3):    # three finished trials that reached 2.0 after two passes
        trial = study.ask(dists)
        trial.report(3.0, 1)
        trial.report(2.0, 2)
        study.tell(trial, 1.5)
    trial = study.ask(dists)
    monitor = TrialMonitor(url, "s", trial._trial_id, "auto", True)
    clone = _clone_with_curve(tmp_path / "clone", [3.5])
    assert monitor.poll(clone) is False          # pass 1 is the warm-up: never pruned
    _clone_with_curve(clone, [3.5, 3.2])
    assert monitor.poll(clone) is True           # pass 2: 3.2, the median is 2.0
    assert study._storage.get_trial(trial._trial_id).intermediate_values == {1: 3.5, 2: 3.2}
    # the worker runs the trial again to the end of pass 2, and pushes that
    _clone_with_curve(clone, [3.5, 3.2, 3.1])    # pass 3 came before the run ended
    assert monitor.cut(clone) == "++step.stop_after_pass=2"
    assert dataclasses.replace(monitor, keep=False).cut(clone) is None   # --no-keep-pruned

    last = study.ask(dists)    # a run whose every pass is in ends as it is, complete
    monitor = TrialMonitor(url, "s", last._trial_id, "auto", True)
    assert monitor.poll(_clone_with_curve(tmp_path / "c1", [3.5, 3.2], outer=2)) is False
    assert monitor.cut(tmp_path / "c1") is None
    study.tell(last, 3.2)

    kept = study.ask(dists)
    monitor = TrialMonitor(url, "s", kept._trial_id, "auto", False)   # --no-prune
    assert monitor.poll(_clone_with_curve(tmp_path / "c2", [3.5, 3.2])) is False
    study.tell(kept, state=TrialState.FAIL)
    assert monitor.poll(tmp_path / "c2") is True   # not running any more: stop the run
    assert monitor.cut(tmp_path / "c2") is None    # and push nothing


def test_the_result_is_the_objective_from_eval_json(tmp_path):
    clone = _clone_with_curve(tmp_path / "clone", [3.0], pending=False)
    folder = clone / "out/train/job-x"
    (folder / "eval.json").write_text('{"loss": 2.5, "bpb": null}')
    assert TrialMonitor("sqlite://", "s", 0, "auto", True).result(clone) == \
        {"objective": 2.5, "metric": "loss"}
    (folder / "eval.json").write_text('{"loss": 2.5, "bpb": 1.25}')
    assert TrialMonitor("sqlite://", "s", 0, "auto", True).result(clone) == \
        {"objective": 1.25, "metric": "bpb"}
    assert "no number 'exact'" in TrialMonitor("sqlite://", "s", 0, "exact", True) \
        .result(clone)["error"]


def test_a_pruned_trial_keeps_its_cut_experiment_and_says_so(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    dims = parse_space(["step.lr=log:0.001..0.1"], PARAMS)
    study = studies.open_study(studies.open_storage(url), "s", dims, "auto", 8, 0, True)
    lines, ticks = [], []
    trials = [study.ask(distributions(dims)) for _ in range(3)]
    for trial in trials:
        trial.report(3.0, 1)
        trial.report(2.5, 2)
    cut = {"state": "stopped", "error": None, "seconds": 4.0,
           "cut": "++step.stop_after_pass=2", "result": {"objective": 2.4, "metric": "loss"}}
    lost = {"state": "stopped", "error": None, "seconds": 4.0,
            "cut_error": "dvc exp run -S ++step.stop_after_pass=2 exited 1: stage step: "
                         "training failed: loss did not fall"}
    done = {"state": "done", "error": None, "seconds": 9.0,
            "result": {"objective": 2.0, "metric": "loss"}}
    for trial, record in zip(trials, (cut, lost, done)):
        tune._finish(study, trial, f"tune-s-{trial.number}", record, lines.append,
                     ticks.append, ())
    assert ticks == ["pruned", "pruned", "done"]
    kept, gone, _ = study.get_trials()
    assert kept.state == gone.state == TrialState.PRUNED
    assert kept.user_attrs == {"experiment": "tune-s-0", "stopped_after_pass": 2,
                               "metric": "loss", "reached": 2.4, "seconds": 4.0}
    assert "experiment" not in gone.user_attrs
    assert lines[0] == "tune-s-0 : pruned after pass 2 in 4.0s; experiment tune-s-0 ends there " \
                       "(loss 2.4)"
    assert lines[1].endswith("; no experiment kept: dvc exp run -S ++step.stop_after_pass=2 "
                             "exited 1: stage step: training failed: loss did not fall")
    assert studies.experiments(study) == ["tune-s-0", "tune-s-2"]   # the driver pulls these
    table, best = studies.report(study, dims, 5, tty=False)
    assert best == "tune-s-2"
    assert "3 trials, 1 complete, 2 pruned (1 kept as experiments with step.stop_after_pass)" \
        ", 0 failed" in table


def test_two_drivers_requeue_a_dead_drivers_trial_once(tmp_path, monkeypatch):
    # the database decides: one driver marks the stale trial failed and queues its params
    # again, and one `ask` (of either driver) takes that copy; the other gets a new trial
    import time

    monkeypatch.setattr(studies, "HEARTBEAT_S", 1)
    monkeypatch.setattr(studies, "GRACE_S", 1)
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    dims = parse_space(["step.lr=log:0.001..0.1"], PARAMS)
    a, b = (studies.open_study(studies.open_storage(url), "s", dims, "auto", 8, seed, True)
            for seed in (0, 1))
    dead = a.ask(distributions(dims))
    a._storage.record_heartbeat(dead._trial_id)
    time.sleep(2.5)
    for study in (b, a, b):
        fail_stale_trials(study)
    trials = a.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    first, second = b.ask(distributions(dims)), a.ask(distributions(dims))
    assert first.params == dead.params and second.params != dead.params
    retried = [RetryHeartbeatStaleTrialCallback.retried_trial_number(
        a._storage.get_trial(t._trial_id)) for t in (first, second)]
    assert retried == [0, None]


def test_the_picture_has_the_history_and_a_panel_per_param(tmp_path):
    from sparktrain.sweep.tuneplot import TrialPoint, render_tune, write_tune_png

    points = [TrialPoint(0, False, 2.0, {"step.lr": 0.01, "step.optimizer": "adamw"}),
              TrialPoint(1, True, 2.5, {"step.lr": 0.1, "step.optimizer": "muon"}),
              TrialPoint(2, False, 1.5, {"step.lr": 0.003, "step.optimizer": "muon"})]
    dims = [("step.lr", "log"), ("step.optimizer", "choice")]
    history, lr, opt = render_tune("t", "bpb", dims, points).axes
    best = [line for line in history.get_lines() if line.get_label() == "best so far"][0]
    assert list(best.get_ydata()) == [2.0, 2.0, 1.5]    # pruned trials never lower it
    assert lr.get_xscale() == "log" and opt.get_xscale() == "linear"
    assert [t.get_text() for t in opt.get_xticklabels()] == ["adamw", "muon"]
    assert write_tune_png(tmp_path / "t.png", "t", "bpb", dims, points)[:4] == b"\x89PNG"


@dataclasses.dataclass(eq=False)
class _Ended:
    """A cluster's Future that has ended with `record`."""
    record: dict

    def done(self) -> bool:
        return True

    def result(self) -> dict:
        return self.record


@pytest.mark.parametrize("space, error", [
    (["step.lr=log:0.001..0.1"], "dvc exp run exited 1: stage step: training failed"),
    (["step.lr=log:0.001..0.1"], None),   # the space itself: no trial reaches a worker
])
def test_trials_that_all_fail_stop_the_run_instead_of_asking_forever(tmp_path, monkeypatch,
                                                                      space, error):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    dims = parse_space(space, PARAMS)
    study = studies.open_study(studies.open_storage(url), "s", dims, "auto", 8, 0, True)
    submitted = []

    def submit(client, plan, name, overrides, scratch, monitor):
        submitted.append(name)
        return _Ended({"state": "failed", "error": error, "seconds": 1.0})

    monkeypatch.setattr(tune, "submit_point", submit)
    # None: every value of the space is refused before it runs (the grid's params check)
    monkeypatch.setattr(tune, "invalid",
                        lambda params, axes, values: None if error else "no such key")
    lines, ticks = [], []
    whole = tune.run_study(None, PARAMS, study, url, dims, 8, "auto", True, None, 2, None,
                           lines.append, ticks.append)
    assert whole is False
    # two slots: the trials already running when the third failure came end too
    assert set(ticks) == {"failed"} and \
        tune.FAILED_IN_ROW <= len(ticks) <= tune.FAILED_IN_ROW + 1
    assert len(study.get_trials()) == len(ticks)
    assert len(submitted) == (len(ticks) if error else 0)
    assert lines[-1].startswith(f"stopped: {len(ticks)} trials in a row failed")


def test_a_success_between_failures_keeps_the_run_going(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    dims = parse_space(["step.lr=log:0.001..0.1"], PARAMS)
    study = studies.open_study(studies.open_storage(url), "s", dims, "auto", 4, 0, False)
    failed = {"state": "failed", "error": "a worker was lost", "seconds": 1.0}
    done = {"state": "done", "error": None, "seconds": 1.0,
            "result": {"objective": 2.0, "metric": "loss"}}
    ends = iter([failed, failed, done, failed, failed, done, done, done])
    monkeypatch.setattr(tune, "submit_point", lambda *a: _Ended(next(ends)))
    monkeypatch.setattr(tune, "invalid", lambda params, axes, values: None)
    ticks = []
    assert tune.run_study(None, PARAMS, study, url, dims, 4, "auto", False, None, 1, None,
                          lambda line: None, ticks.append) is True
    assert ticks == ["failed", "failed", "done", "failed", "failed", "done", "done", "done"]
