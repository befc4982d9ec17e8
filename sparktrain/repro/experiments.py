"""DVC experiments as data, through DVC's Python API: the one reader that
`spark compare` and `spark sweep` share.

`dvc.api.exp_show` lists the experiments (name, rev, the baseline commit they
ran on); each experiment's files are read at its rev the way `dvc.api.open`
reads them (a `dvc.repo.Repo` opened at the rev, its `dvcfs`): a Git-tracked
file (params.yaml, dvc.lock) from the commit, an output (eval.json,
checkpoint.json) from the DVC cache by the hash that commit's dvc.lock records.
A Repo is held per rev until close(), so the several files of one experiment
cost DVC one look at its dvc.yaml and dvc.lock, not one each (`dvc.api.open` opens a Repo
per call: 3x slower at 16 experiments). The table `exp_show` prints is lossy (every value passes
through text, 0 becomes None), so params and metrics are read from the files
themselves, every read bounded (MAX_FILE_BYTES) and parsed by safeload's
bounded loaders. See docs/pipeline.md ("Sweep and compare").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sparktrain.core.textout import first_line
from sparktrain.core.errors import SparkError
from sparktrain.core.jobfiles import CHECKPOINT, EVAL, job_dir
from sparktrain.core.project import PARAMS_FILE
from sparktrain.core.safeload import MAX_ITEMS, load_json, load_yaml

MAX_FILE_BYTES = 16 * 2 ** 20   # params.yaml, dvc.lock, eval.json, checkpoint.json
# exp_show's State column: anything but these has no results to read
DONE_STATES = (None, "Success")


@dataclass(frozen=True)
class ExpRow:
    """One experiment (or a baseline commit) as `dvc exp show` lists it."""
    name: str
    rev: str          # as exp_show gives it (a short sha, or a branch name for a baseline)
    baseline: str     # the name of the baseline it ran on (itself for a baseline)


class Experiments(Protocol):
    """What compare and sweep read; tests hand in a fake with the same two methods."""

    def rows(self, rev: str | None = None) -> tuple[list[ExpRow], list[ExpRow]]:
        """(experiments oldest first, baselines) of `rev` (default HEAD)."""

    def read(self, path: str, rev: str) -> bytes | None:
        """`path` at `rev` (at most MAX_FILE_BYTES), None when that rev has no such file."""


class DvcExperiments:
    """The experiments of the DVC repository in the current folder (or `repo`)."""

    def __init__(self, repo: str | None = None):
        self.repo = repo
        self._held = {}   # rev -> the dvc.repo.Repo opened at it

    def close(self) -> None:
        for repo in self._held.values():
            repo.close()
        self._held = {}

    def __enter__(self) -> "DvcExperiments":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _at(self, rev: str):
        from dvc.repo import Repo

        if rev not in self._held:
            self._held[rev] = Repo.open(self.repo, rev=rev, subrepos=True, uninitialized=True)
        return self._held[rev]

    def rows(self, rev: str | None = None) -> tuple[list[ExpRow], list[ExpRow]]:
        import dvc.api
        from dvc.exceptions import DvcException

        try:
            table = dvc.api.exp_show(repo=self.repo, revs=rev)
        except (DvcException, OSError) as err:
            raise SparkError(f"`dvc exp show` failed: {first_line(err)}") from None
        return table_rows(table)

    def read(self, path: str, rev: str) -> bytes | None:
        from dvc.exceptions import DvcException, PathMissingError

        try:
            with self._at(rev).dvcfs.open(path, mode="rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except (PathMissingError, FileNotFoundError):
            return None
        except IsADirectoryError:
            raise SparkError(f"{path} at {rev} is a folder, not a file") from None
        except (DvcException, OSError) as err:
            raise SparkError(f"cannot read {path} at {rev}: {first_line(err)}; fetch it "
                             f"with `dvc exp pull <remote> {rev}`") from None
        if len(data) > MAX_FILE_BYTES:
            raise SparkError(f"{path} at {rev} is larger than {MAX_FILE_BYTES} bytes; "
                             f"not read")
        return data


def table_rows(table: list[dict]) -> tuple[list[ExpRow], list[ExpRow]]:
    """(experiments oldest first, baselines) of `dvc.api.exp_show`'s rows: each
    baseline row ("typ": "baseline") is followed by its experiments, newest first.
    The workspace and queued, running or failed experiments are left out."""
    experiments, baselines, base, group = [], [], None, []
    for row in table:
        rev, kind = row.get("rev"), row.get("typ")
        if kind == "baseline":
            experiments += reversed(group)
            group, base = [], None
            if rev and rev != "workspace":
                base = ExpRow(str(rev), str(rev), str(rev))
                baselines.append(base)
        elif base is not None and rev and row.get("State") in DONE_STATES:
            group.append(ExpRow(str(row.get("Experiment") or rev), str(rev), base.name))
    experiments += reversed(group)
    return experiments, baselines


def read_yaml(source: Experiments, path: str, rev: str):
    """A YAML file at a rev, parsed with the bounded loader (None: no such file)."""
    data = source.read(path, rev)
    return None if data is None else load_yaml(data, f"{path} at {rev}")


def read_json(source: Experiments, path: str, rev: str, max_items: int = MAX_ITEMS):
    """A JSON file at a rev, parsed with the bounded loader (None: no such file);
    `max_items` the bound on its values (a checkpoint's is sized from its curve)."""
    data = source.read(path, rev)
    return None if data is None else load_json(data, f"{path} at {rev}", max_items=max_items)


@dataclass(frozen=True)
class ExpRecord:
    """One experiment as its commit recorded it: what `spark compare` and `spark
    sweep` both start from."""
    row: ExpRow
    params: dict               # its params.yaml ({} when absent or not a mapping)
    metrics_path: str          # the job's eval.json
    metrics: dict | None       # None: see metrics_error
    metrics_error: str | None

    def job_file(self, name: str) -> str:
        return (job_dir(str(self.params.get("job"))) / name).as_posix()


def read_params(source: Experiments, rev: str) -> dict:
    """params.yaml at a rev ({} when absent or not a mapping)."""
    params = read_yaml(source, PARAMS_FILE, rev)
    return params if isinstance(params, dict) else {}


def read_record(source: Experiments, row: ExpRow) -> ExpRecord:
    """An experiment's params.yaml and its job's eval.json, both bounded; an eval.json
    that is missing or unreadable is recorded as why, not raised."""
    params = read_params(source, row.rev)
    path = (job_dir(str(params.get("job"))) / EVAL).as_posix()
    try:
        metrics = read_json(source, path, row.rev)
        error = None if isinstance(metrics, dict) else "not in the experiment"
    except SparkError as err:
        metrics, error = None, str(err)
    return ExpRecord(row, params, path, metrics if error is None else None, error)


def read_checkpoint(source: Experiments, record: ExpRecord, max_items: int) -> dict | None:
    """The experiment's checkpoint.json (from the DVC cache); None when it has none."""
    return read_json(source, record.job_file(CHECKPOINT), record.row.rev, max_items=max_items)
