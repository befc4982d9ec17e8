"""`spark tune`'s driver: an Optuna study (sweep/study.py) whose trials are `dvc exp run
-n tune-<study>-<n> -S ...` points, run by the sweep's point runner on the Dask cluster
(point.py, driver.py). The driver asks Optuna for a trial's params, submits it with its
monitor (monitor.py), beats the heartbeats of its running trials, and tells Optuna how
each ended: the objective the worker read, pruned (and kept as an experiment ended after
the pass it reached), or failed (docs/tuning.md "Tuning")."""
from __future__ import annotations

import time
from dataclasses import dataclass

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback, fail_stale_trials
from optuna.trial import TrialState

from sparktrain.sweep.driver import SweepPlan, submit_point, task_failed
from sparktrain.sweep.grid import Axis, invalid
from sparktrain.sweep.monitor import TrialMonitor
from sparktrain.sweep.space import distributions
from sparktrain.sweep.study import FINISHED, HEARTBEAT_S, STOPPED_ATTR

FAILED_IN_ROW = 3                  # this many failed trials in a row stop the run: a broken
                                   # recipe or space fails every trial, and failed ones never count


@dataclass
class Running:
    trial: optuna.trial.Trial
    name: str
    overrides: tuple[str, ...]


def run_study(plan: SweepPlan, params: dict, study: optuna.Study, storage_url: str, dims,
              trials: int, objective: str, prune: bool, client, slots: int,
              scratch: str | None, progress, tick=lambda state: None,
              keep_pruned: bool = True) -> bool:
    """Run trials until the study has `trials` finished ones (complete or pruned; failed
    ones do not count), `slots` at a time; `keep_pruned`: a pruned trial's run is run
    again to the pass it reached and kept as its experiment. False when it stopped short
    because FAILED_IN_ROW trials in a row failed (a space or recipe that fails every
    trial would otherwise ask for trials forever)."""
    storage = study._storage
    running: dict = {}   # Future -> Running
    failed_in_row = 0

    def finish(trial, name, record, overrides) -> None:
        nonlocal failed_in_row
        state = _finish(study, trial, name, record, progress, tick, overrides)
        failed_in_row = failed_in_row + 1 if state == "failed" else \
            failed_in_row if state == "requeued" else 0

    while True:
        fail_stale_trials(study)   # a dead driver's trials: FAIL, and queued again
        states = [t.state for t in study.get_trials(deepcopy=False)]
        finished = sum(s in FINISHED for s in states)
        taken = finished + sum(s == TrialState.RUNNING for s in states)
        stop = failed_in_row >= FAILED_IN_ROW   # ask for no more; let the running ones end
        if stop and not running:
            progress(f"stopped: {failed_in_row} trials in a row failed (their lines above "
                     f"say why); fix that and run the same command again: the study "
                     f"keeps its finished trials")
            return False
        while not stop and len(running) < slots and taken < trials:
            trial, name, overrides, error = _ask(study, dims, params)
            if error:   # refused by the params check: a failed trial, not one of `trials`
                finish(trial, name, {"state": "failed", "error": error}, overrides)
                stop = failed_in_row >= FAILED_IN_ROW
                continue
            taken += 1
            retry = RetryHeartbeatStaleTrialCallback.retried_trial_number(
                storage.get_trial(trial._trial_id))
            progress(f"{name} {' '.join(overrides)}: started"
                     + (f" (again: trial {retry}'s driver stopped)" if retry is not None else ""))
            monitor = TrialMonitor(storage_url, study.study_name, trial._trial_id, objective,
                                   prune, keep_pruned)
            running[submit_point(client, plan, name, overrides, scratch, monitor)] = \
                Running(trial, name, overrides)
        if not running:
            if stop:
                continue   # says so above
            if finished >= trials:   # (else others run: taken counts them)
                return True
            time.sleep(HEARTBEAT_S)   # another driver's (or a dead one's) trials still run
            continue
        done = _first_done(list(running), HEARTBEAT_S)
        for run in running.values():
            storage.record_heartbeat(run.trial._trial_id)
        for future in done:
            run = running.pop(future)
            finish(run.trial, run.name, _record(future, run.name), run.overrides)


def _ask(study: optuna.Study, dims, params: dict) -> tuple:
    """The next trial (a queued one first), its heartbeat begun: (trial, its experiment's
    name, its -S overrides, the params check's refusal of them or None)."""
    trial = study.ask(distributions(dims))
    study._storage.record_heartbeat(trial._trial_id)
    overrides = tuple(d.override(trial.params[d.key]) for d in dims)
    axes = [Axis(d.key, (), d.add) for d in dims]
    error = invalid(params, axes, [o.split("=", 1)[1] for o in overrides])
    return trial, f"tune-{study.study_name}-{trial.number}", overrides, error


def _record(future, name: str) -> dict:
    """What the worker sent back, or the record of a task that itself died."""
    try:
        return future.result()
    except Exception as err:   # the worker was lost, the task could not be unpickled, ...
        return task_failed(name, err)


def _first_done(futures: list, within_s: float) -> list:
    """The futures that are done, waiting at most `within_s` for a first one. Each Future's
    own state is polled (no call into the cluster that could block past a heartbeat)."""
    deadline = time.monotonic() + within_s
    while True:
        done = [f for f in futures if f.done()]
        if done or time.monotonic() >= deadline:
            return done
        time.sleep(0.1)


def _finish(study, trial, name, record, progress, tick, overrides) -> str:
    """Tell Optuna how the trial ended, and say it; the state it ended in ("done",
    "pruned", "failed", or "requeued": another driver took it meanwhile)."""
    result = record.get("result") or {}
    error = record.get("error") or result.get("error")
    frozen = study._storage.get_trial(trial._trial_id)
    if frozen.state != TrialState.RUNNING:   # taken as stale meanwhile: queued again
        progress(f"{name}: {record['state']}, but its trial was queued again meanwhile")
        return "requeued"
    if record.get("seconds") is not None:
        trial.set_user_attr("seconds", record["seconds"])
    took = f" in {record['seconds']:.1f}s" if record.get("seconds") else ""
    if record["state"] == "stopped":
        passes, note = max(frozen.intermediate_values or [0]), ""
        if record.get("cut"):   # its experiment: the run again, ended after that pass
            trial.set_user_attr("experiment", name)
            trial.set_user_attr(STOPPED_ATTR, int(record["cut"].rsplit("=", 1)[1]))
            note = f"; experiment {name} ends there"
            if "objective" in result:
                trial.set_user_attr("metric", result["metric"])
                trial.set_user_attr("reached", result["objective"])
                note += f" ({result['metric']} {result['objective']:.5g})"
        elif record.get("cut_error"):
            note = f"; no experiment kept: {record['cut_error']}"
        study.tell(trial, state=TrialState.PRUNED)
        progress(f"{name} {' '.join(overrides)}: pruned after pass {passes}{took}{note}")
        tick("pruned")
        return "pruned"
    if record["state"] == "done" and not error:
        trial.set_user_attr("experiment", name)
        trial.set_user_attr("metric", result["metric"])
        study.tell(trial, result["objective"])
        progress(f"{name} {' '.join(overrides)}: {result['metric']} "
                 f"{result['objective']:.5g}{took}")
        tick("done")
        return "done"
    trial.set_user_attr("error", error)
    study.tell(trial, state=TrialState.FAIL)
    progress(f"{name} {' '.join(overrides)}: failed{took}: {error}")
    tick("failed")
    return "failed"

