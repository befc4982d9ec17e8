"""`spark tune`: an Optuna study whose trials are `dvc exp run -n tune-<study>-<n> -S ...`
points, run by the sweep's point runner on the Dask cluster (point.py, driver.py). The driver asks
Optuna for a trial's params, submits it, and tells Optuna the objective the worker read
from the trial's eval.json. While a trial runs, its monitor (on the worker) reports each
pass's held-out figure from the curve the step writes as an intermediate value and asks
the pruner; a pruned trial's run is stopped there, then run again to the end of the pass
it reached (`step.stop_after_pass`), and that is pushed as its experiment. The study
lives in a database (SQLite under out/ by default) that the driver and the workers
share: heartbeats from the driver mark its running trials alive, so a driver that died
leaves trials that the next one finds stale and queues again (docs/pipeline.md
"Tuning")."""
from __future__ import annotations

import math
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback, fail_stale_trials
from optuna.trial import TrialState

from sparktrain.core.errors import SparkError, printable
from sparktrain.core.jobfiles import EVAL, LIVE_PENDING, OUT, PARAMS_FILE, job_dir
from sparktrain.core.safeload import load_json_file, load_yaml
from sparktrain.core.fsutil import read_input
from sparktrain.core.values import is_number
from sparktrain.params import StepConfig
from sparktrain.sweep.driver import SweepPlan, submit_point, task_failed
from sparktrain.sweep.grid import Axis, invalid
from sparktrain.sweep.space import Dimension, describe, distributions, signature
from sparktrain.train.live import SERIES, series_path

STORAGE_FILE = "tune.db"           # the default storage, under the project root's out/
SPACE_ATTR = "spark_space"         # the study's user attribute holding its space's signature
OBJECTIVE_ATTR = "spark_objective"
STOPPED_ATTR = "stopped_after_pass"  # a pruned trial's: its experiment's step.stop_after_pass
HEARTBEAT_S, GRACE_S = 2, 10       # a running trial without a heartbeat for GRACE_S is stale
FAILED_IN_ROW = 3                  # this many failed trials in a row stop the run: a broken
                                   # recipe or space fails every trial, and failed ones never count
AUTO = "auto"                      # the objective: bpb when eval.json has it, else loss
# the per-pass held-out series (sparktrain/train/live.py) of each objective that has one
CURVES = {"bpb": SERIES["heldout_bpb"], "loss": "heldout_loss"}
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=ExperimentalWarning)  # heartbeats, the retry
# our driver beats the heartbeats itself (study.optimize would, in one process)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


def default_storage(root: Path) -> str:
    return f"sqlite:///{(root / OUT / STORAGE_FILE).resolve()}"


def open_storage(url: str) -> RDBStorage:
    """The study database, one line when it cannot be opened. SQLite waits for a lock
    (the driver and every worker write to it) instead of failing at once."""
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    try:
        return RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_S,
                          grace_period=GRACE_S,
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                              max_retry=None))
    except Exception as err:  # SQLAlchemy's errors for a bad URL, driver or file are many
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SparkError(f"cannot open the study storage {url}: {first}") from None


def make_pruner(prune: bool):
    """The median rule: from the 2nd pass on, a trial whose best held-out figure so far is
    worse than the median of the finished trials' at that pass stops (after 3 finished)."""
    if not prune:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2)


def check_study_name(name: str) -> str:
    if not STUDY_NAME.fullmatch(name):
        raise SparkError(f"--study {printable(name)!r}: a study name is letters, digits, _ and "
                         f"- (at most 64, starting with a letter or digit): its trials are "
                         f"the experiments tune-<study>-<n>")
    return name


def open_study(storage: RDBStorage, name: str, dims, objective: str, trials: int, seed: int,
               prune: bool) -> optuna.Study:
    """Create the study or load it; a study that holds another space (or objective) is
    refused rather than mixed."""
    study = optuna.create_study(storage=storage, study_name=name, direction="minimize",
                                pruner=make_pruner(prune), load_if_exists=True)
    # a resumed study's sampler starts where the last one stopped, not at the same draws
    study.sampler = optuna.samplers.TPESampler(
        seed=seed + len(study.get_trials(deepcopy=False)), constant_liar=True,
        n_startup_trials=max(3, min(10, trials // 3)))
    held = study.user_attrs.get(SPACE_ATTR)
    if held is None:
        study.set_user_attr(SPACE_ATTR, signature(dims))
        study.set_user_attr(OBJECTIVE_ATTR, objective)
    elif held != signature(dims):
        raise SparkError(f"study {name!r} holds another search space ({describe(held)}); give "
                         f"those -S again to resume it, or another --study")
    elif study.user_attrs.get(OBJECTIVE_ATTR) != objective:
        raise SparkError(f"study {name!r} minimises {study.user_attrs.get(OBJECTIVE_ATTR)!r}, "
                         f"not {objective!r}; resume it with that --objective, or another "
                         f"--study")
    return study


@dataclass
class TrialMonitor:
    """On the worker: reports the run's per-pass held-out figure to the trial (step k =
    after pass k) and says whether the pruner stops it; then reads the objective."""
    storage_url: str
    study: str
    trial_id: int
    objective: str
    prune: bool
    keep: bool = True              # a pruned run is run again to its pass and pushed (cut)
    reported: int = 0
    stopped_after: int = 0         # the passes reported when the pruner stopped the run
    _trial: optuna.trial.Trial | None = field(default=None, repr=False)

    def __getstate__(self):
        return {**self.__dict__, "_trial": None}   # the database connection stays here

    def _params(self, clone: Path) -> dict:
        """The clone's params.yaml, as the run's overrides left it."""
        return load_yaml(read_input(clone / PARAMS_FILE, "params file"), PARAMS_FILE) or {}

    def _job_folder(self, clone: Path) -> Path:
        return clone / job_dir(str(self._params(clone).get("job", "")))

    def _curve(self, folder: Path) -> list[float]:
        names = [CURVES[self.objective]] if self.objective in CURVES else \
            list(CURVES.values()) if self.objective == AUTO else []
        for name in names:
            for base in (folder / LIVE_PENDING, folder):   # while it runs, then published
                path = series_path(base, name)
                try:
                    rows = path.read_text().splitlines()[1:]
                except OSError:
                    continue
                values = [float(row.split("\t")[1]) for row in rows if "\t" in row]
                if len(values) > 1:   # row 0 is the start, before any pass
                    return values[1:]
        return []

    def poll(self, clone: Path) -> bool:
        """True: pruned, or the trial is no longer running in the study (its driver died
        and another queued it again: this run would be a second one)."""
        if self._trial is None:
            study = optuna.load_study(study_name=self.study, pruner=make_pruner(self.prune),
                                      storage=open_storage(self.storage_url))
            self._trial = optuna.trial.Trial(study, self.trial_id)
        study = self._trial.study
        fail_stale_trials(study)
        if study._storage.get_trial(self.trial_id).state != TrialState.RUNNING:
            return True
        values = self._curve(self._job_folder(clone))
        if len(values) <= self.reported:
            return False
        for step in range(self.reported, len(values)):
            if math.isfinite(values[step]):
                self._trial.report(values[step], step + 1)
        self.reported = len(values)
        step = self._params(clone).get("step")
        outer = step.get("outer", StepConfig().outer) if isinstance(step, dict) else None
        if isinstance(outer, int) and self.reported >= outer:
            return False   # every pass is in: the run ends as it is, complete
        if self._trial.should_prune():
            self.stopped_after = self.reported
            return True
        return False

    def cut(self, clone: Path) -> str | None:
        """After the pruner's stop: the override that ends the run after the pass it was
        stopped at (the worker runs the trial again with it, and pushes that); None when
        the run was stopped because its trial no longer runs in the study."""
        if not self.keep or not self.stopped_after or \
                self._trial.study._storage.get_trial(self.trial_id).state != TrialState.RUNNING:
            return None
        return f"++step.stop_after_pass={self.stopped_after}"

    def result(self, clone: Path) -> dict:
        folder = self._job_folder(clone)
        if self._trial is not None and not self.stopped_after:   # the passes after the last poll
            self.poll(clone)
        metrics = load_json_file(folder / EVAL, "eval file", EVAL)
        key = self.objective if self.objective != AUTO else \
            "bpb" if isinstance(metrics.get("bpb"), (int, float)) else "loss"
        value = metrics.get(key)
        if not is_number(value):
            known = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
            return {"error": f"eval.json has no number {key!r} (it has {', '.join(known)})"}
        return {"objective": float(value), "metric": key}


def finished(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def experiments(study: optuna.Study) -> list[str]:
    """The experiments of the study's complete trials and of its pruned ones that were
    run again to the pass they were stopped at (pushed by their workers)."""
    return [t.user_attrs["experiment"] for t in study.get_trials(deepcopy=False, states=FINISHED)
            if "experiment" in t.user_attrs and
            (t.state == TrialState.COMPLETE or STOPPED_ATTR in t.user_attrs)]


def experiment_name(study: str, number: int) -> str:
    return f"tune-{study}-{number}"


def _overrides(dims: tuple[Dimension, ...], params: dict) -> tuple[str, ...]:
    return tuple(d.override(params[d.key]) for d in dims)


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
        taken = sum(s in FINISHED or s == TrialState.RUNNING for s in states)
        if failed_in_row >= FAILED_IN_ROW:   # ask for no more; let the running ones end
            taken = trials
            if not running:
                progress(f"stopped: {failed_in_row} trials in a row failed (their lines above "
                         f"say why); fix that and run the same command again: the study "
                         f"keeps its finished trials")
                return False
        while len(running) < slots and taken < trials:
            trial, name, overrides, error = _ask(study, dims, params)
            taken += 1
            if error:
                finish(trial, name, {"state": "failed", "error": error}, overrides)
                if failed_in_row >= FAILED_IN_ROW:
                    break
                continue
            retry = RetryHeartbeatStaleTrialCallback.retried_trial_number(
                storage.get_trial(trial._trial_id))
            progress(f"{name} {' '.join(overrides)}: started"
                     + (f" (again: trial {retry}'s driver stopped)" if retry is not None else ""))
            monitor = TrialMonitor(storage_url, study.study_name, trial._trial_id, objective,
                                   prune, keep_pruned)
            running[submit_point(client, plan, name, overrides, scratch, monitor)] = \
                Running(trial, name, overrides)
        if not running:
            if failed_in_row >= FAILED_IN_ROW:
                continue   # says so above
            if taken - sum(s == TrialState.RUNNING for s in states) >= trials or \
                    not any(s == TrialState.RUNNING for s in states):
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
    overrides = _overrides(dims, trial.params)
    axes = [Axis(d.key, (), d.add) for d in dims]
    error = invalid(params, axes, [o.split("=", 1)[1] for o in overrides])
    return trial, experiment_name(study.study_name, trial.number), overrides, error


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


def trial_points(study: optuna.Study) -> list:
    """The study's finished trials as the picture draws them (tuneplot.TrialPoint)."""
    from sparktrain.sweep.tuneplot import TrialPoint

    points = []
    for t in study.get_trials(deepcopy=False, states=FINISHED):
        value = t.value if t.value is not None else \
            t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None
        if value is not None and math.isfinite(value):
            points.append(TrialPoint(t.number, t.state == TrialState.PRUNED, value, t.params))
    return points


def report(study: optuna.Study, dims, top: int, tty: bool | None = None) -> tuple[str, str | None]:
    """(the table of the best complete trials and the counts, the best's experiment)."""
    from sparktrain.core.errors import columns

    trials = study.get_trials(deepcopy=False)
    done = sorted((t for t in trials if t.state == TrialState.COMPLETE),
                  key=lambda t: (t.value, t.number))
    metric = metric_name(study)
    head = ["Trial", "Experiment", *(d.key for d in dims), metric, "Seconds"]
    rows = [[str(t.number), t.user_attrs.get("experiment", "-"),
             *(_cell(t.params.get(d.key)) for d in dims), f"{t.value:.5g}",
             _cell(t.user_attrs.get("seconds"))] for t in done[:top]]
    count = {s: sum(t.state == s for t in trials) for s in TrialState}
    lines = columns(head, rows, rule=True, tty=tty) if rows else ["no complete trial yet"]
    kept = sum(t.state == TrialState.PRUNED and STOPPED_ATTR in t.user_attrs for t in trials)
    lines.append(f"study {study.study_name!r}: {len(trials)} trials, "
                 f"{count[TrialState.COMPLETE]} complete, {count[TrialState.PRUNED]} pruned"
                 + (f" ({kept} kept as experiments with step.stop_after_pass)" if kept else "")
                 + f", {count[TrialState.FAIL]} failed"
                 + (f", {count[TrialState.RUNNING]} running" if count[TrialState.RUNNING] else ""))
    best = done[0].user_attrs.get("experiment") if done else None
    return "\n".join(lines), best


def _cell(value) -> str:
    return "-" if value is None else f"{value:.5g}" if isinstance(value, float) else str(value)


def metric_name(study: optuna.Study) -> str:
    """The objective's eval.json key (auto: the one the complete trials read)."""
    metric = study.user_attrs.get(OBJECTIVE_ATTR, AUTO)
    if metric == AUTO:
        read = {t.user_attrs.get("metric") for t in study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE,))} - {None}
        metric = read.pop() if len(read) == 1 else "objective"
    return metric
