"""`spark tune`'s study: the Optuna database that the driver (sweep/tune.py) and the
workers' monitors (sweep/monitor.py) share (SQLite under out/ by default), opened or
created for one search space and objective, and read back: the experiments its trials
left, the table of the best and the points of its picture. Heartbeats
mark a driver's running trials alive, so the trials of a driver that died turn stale
and are queued again (docs/tuning.md "Tuning")."""
from __future__ import annotations

import contextlib
import math
import re
import sqlite3
import warnings
from pathlib import Path

import optuna
from optuna.exceptions import ExperimentalWarning, StorageInternalError
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from sparktrain.core.errors import SparkError, columns, did_you_mean, printable
from sparktrain.core.jobfiles import OUT
from sparktrain.sweep.filelock import held
from sparktrain.sweep.space import describe, signature

STORAGE_FILE = "tune.db"           # the default storage, under the project root's out/
SPACE_ATTR = "spark_space"         # the study's user attribute holding its space's signature
OBJECTIVE_ATTR = "spark_objective"
STOPPED_ATTR = "stopped_after_pass"  # a pruned trial's: its experiment's step.stop_after_pass
HEARTBEAT_S, GRACE_S = 2, 10       # a running trial without a heartbeat for GRACE_S is stale
AUTO = "auto"                      # the objective: bpb when eval.json has it, else loss
# the eval.json figures (core/metric_keys.py HEADLINE_KEYS) of the model where lower is
# better: accuracies grow, and the compressors' baselines do not depend on the model
OBJECTIVES = (AUTO, "loss", "bpb", "bpb_sliding", "perplexity")
SEEDS = 2 ** 32                    # numpy's seeds: 0 .. 2**32 - 1
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=ExperimentalWarning)  # heartbeats, the retry
# our driver beats the heartbeats itself (study.optimize would, in one process)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


def default_storage(root: Path) -> str:
    return f"sqlite:///{(root / OUT / STORAGE_FILE).resolve()}"


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise SparkError(f"--objective {printable(objective)!r}: spark tune minimises one of "
                         f"{', '.join(OBJECTIVES)}{did_you_mean(objective, OBJECTIVES)}")
    return objective


def check_storage(url: str, local: bool) -> str:
    """The storage URL as every process reaches it, before any study is touched: an
    in-memory SQLite database lives in this process only (the workers write their trials'
    figures to it), and a relative SQLite path becomes absolute when the workers are
    `local` (a remote cluster's workers resolve it themselves)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SparkError(f"cannot open the study storage {printable(url)}: not an SQLAlchemy "
                         f"URL (e.g. sqlite:///out/tune.db, postgresql://HOST/DB)") from None
    if parsed.get_backend_name() != "sqlite":
        return url
    database = parsed.database or ""
    if database in ("", ":memory:") or parsed.query.get("mode") == "memory":
        raise SparkError(f"--storage {printable(url)} is an SQLite database in memory, which "
                         f"the workers cannot reach (they write their trials' figures to "
                         f"it); give a file, sqlite:///PATH, or a database server")
    if local and not database.startswith("file:") and not Path(database).is_absolute():
        return parsed.set(database=str(Path(database).resolve())).render_as_string(False)
    return url


def creating(url: str):
    """Held while a driver creates or opens the study: two drivers started together on a
    fresh SQLite file would both create its tables (alembic's UNIQUE version row) and
    both set the study's space; with the lock the second finds them made. A server
    database orders that itself."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or (parsed.database or "").startswith("file:"):
        return contextlib.nullcontext()
    return held(Path(parsed.database + ".lock"))


@contextlib.contextmanager
def storage_errors(url: str):
    """A failure of the study's database (a full disk, a lost server) as one line that
    names its cause, not Optuna's "e.g. exceeding max length" over SQLAlchemy's trace."""
    try:
        yield
    except (StorageInternalError, SQLAlchemyError, sqlite3.Error) as err:
        raise SparkError(f"the study storage {url} failed: {storage_cause(err)}; the study "
                         f"keeps its finished trials: fix that and run the same command "
                         f"again") from None


def storage_cause(err: BaseException) -> str:
    """The first line of the deepest error under `err` (the database's own words)."""
    seen, cause = set(), err
    while id(cause) not in seen:
        seen.add(id(cause))
        below = getattr(cause, "orig", None) or cause.__cause__ or cause.__context__
        if not isinstance(below, BaseException):
            break
        cause = below
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def open_storage(url: str) -> RDBStorage:
    """The study database, one line when it cannot be opened. SQLite waits for a lock
    (the driver and every worker write to it) instead of failing at once."""
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    try:
        storage = RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_S,
                             grace_period=GRACE_S,
                             heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                                 max_retry=None))
    except Exception as err:  # SQLAlchemy's errors for a bad URL, driver or file are many
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SparkError(f"cannot open the study storage {url}: {first}") from None
    if storage.engine.dialect.driver == "pysqlite":
        _write_locked_transactions(storage.engine)
    return storage


def _write_locked_transactions(engine) -> None:
    """Every SQLite transaction of `engine` begins with the database's write lock (BEGIN
    IMMEDIATE), the SQLAlchemy recipe for the pysqlite driver. Optuna reads a trial's state
    and then changes it, counting on SELECT ... FOR UPDATE, which SQLite ignores; and the
    driver begins a transaction only at the first write. So two processes that both read a
    stale trial as running both failed it and both queued it again (a killed driver's
    trial ran twice; 6 processes at once: up to 6 copies), and two drivers could both pop
    one queued trial. Under the write lock the read and the change are one step."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_driver_begin(dbapi_connection, _record):
        dbapi_connection.isolation_level = None   # pysqlite: no BEGIN of its own

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()   # connections made before the hooks (the tables' check) go


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
    # (mod numpy's seed range, so a study begun at the largest seed resumes too)
    study.sampler = optuna.samplers.TPESampler(
        seed=(seed + len(study.get_trials(deepcopy=False))) % SEEDS, constant_liar=True,
        n_startup_trials=max(3, min(10, trials // 3)))
    stored = study.user_attrs.get(SPACE_ATTR)
    if SPACE_ATTR not in study.user_attrs:
        study.set_user_attr(SPACE_ATTR, signature(dims))
        study.set_user_attr(OBJECTIVE_ATTR, objective)
    elif stored != signature(dims):
        raise SparkError(f"study {name!r} holds another search space ({describe(stored)}); give "
                         f"those -S again to resume it, or another --study")
    elif study.user_attrs.get(OBJECTIVE_ATTR) != objective:
        raise SparkError(f"study {name!r} minimises {study.user_attrs.get(OBJECTIVE_ATTR)!r}, "
                         f"not {objective!r}; resume it with that --objective, or another "
                         f"--study")
    return study


def experiments(study: optuna.Study) -> list[str]:
    """The experiments of the study's complete trials and of its pruned ones that were
    run again to the pass they were stopped at (pushed by their workers)."""
    return [t.user_attrs["experiment"] for t in study.get_trials(deepcopy=False, states=FINISHED)
            if "experiment" in t.user_attrs and
            (t.state == TrialState.COMPLETE or STOPPED_ATTR in t.user_attrs)]


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
