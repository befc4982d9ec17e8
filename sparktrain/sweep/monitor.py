"""`spark tune`'s trial monitor, on the Dask worker that runs the trial (sweep/point.py
calls it while `dvc exp run` runs): it reports each pass's held-out figure, read from
the curve the step stage writes, to the trial as an intermediate value, asks the pruner,
gives the override that runs a pruned trial again to the end of the pass it reached
(`step.stop_after_pass`), and reads the objective from the trial's eval.json
(docs/tuning.md "Tuning")."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from sparktrain.core.fsutil import read_input
from sparktrain.core.jobfiles import EVAL, LIVE_PENDING, PARAMS_FILE, job_dir
from sparktrain.core.safeload import load_json_file, load_yaml
from sparktrain.core.values import is_number
from sparktrain.params import StepConfig
from sparktrain.sweep.study import AUTO, make_pruner, open_storage, storage_errors
from sparktrain.train.live import SERIES, series_path

# the per-pass held-out series (sparktrain/train/live.py) of each objective that has one
CURVES = {"bpb": SERIES["heldout_bpb"], "loss": "heldout_loss"}


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
        and another queued it again: this run would be a second one). A failure of the
        study's database is one line naming its cause (the trial's failure)."""
        with storage_errors(self.storage_url):
            return self._poll(clone)

    def _poll(self, clone: Path) -> bool:
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

