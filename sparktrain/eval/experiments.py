"""DVC experiments as data, the one reader `spark compare` and `spark sweep` share: rows
from git's refs, YAML from git blobs through the bounded loader before DVC opens a rev,
outputs from the DVC cache; every read capped (docs/pipeline.md, "Sweep and compare")."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from sparktrain.core.errors import SparkError, first_line
from sparktrain.core.jobfiles import EVAL, PARAMS_FILE, job_dir
from sparktrain.core.safeload import MAX_ITEMS, load_json, load_yaml
from sparktrain.repro.dvclock import LOCK
from sparktrain.repro.toolenv import MAX_BLOB_BYTES, git, git_blob

MAX_FILE_BYTES = MAX_BLOB_BYTES   # params.yaml, dvc.lock, eval.json, checkpoint.json
# a finished experiment's ref: refs/exps/<2 hex>/<38 hex>/<name> (queued, running and
# failed ones live elsewhere under refs/exps/)
EXP_REF = re.compile(r"refs/exps/([0-9a-f]{2})/([0-9a-f]{38})/([^/]+)")
DVC_YAMLS = (PARAMS_FILE, "dvc.yaml", LOCK)  # what DVC parses when it opens a rev


@dataclass(frozen=True)
class ExpRow:
    """One experiment (or a baseline commit) as `dvc exp show` lists it."""
    name: str
    rev: str          # its commit's sha
    baseline: str     # the name of the baseline it ran on (itself for a baseline)


class Experiments(Protocol):
    """What compare and sweep read; tests hand in a fake with the same two methods."""

    def rows(self, rev: str | None = None) -> tuple[list[ExpRow], list[ExpRow]]:
        """(its experiments oldest first, [the baseline itself]), from git's refs."""

    def read(self, path: str, rev: str) -> bytes | None:
        """`path` at `rev` (at most MAX_FILE_BYTES), None when that rev has no such file."""

    def baseline_of(self, name: str) -> str | None:
        """The baseline commit of the experiment called `name`, on any commit; None if none."""


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

    def _git(self, *args: str) -> list[str]:
        done = git(*args, cwd=self.repo)
        if done.returncode != 0:
            raise SparkError(f"`git {args[0]}` failed: {first_line(done.stderr or 'no repository')}"
                             f" (run it inside a git repository with DVC experiments)")
        return done.stdout.split("\n")

    def _at(self, rev: str):
        from dvc.repo import Repo

        if rev not in self._held:
            for name in DVC_YAMLS:  # ours first: DVC's parser would expand an alias bomb
                read_yaml_at(self, name, rev)
            self._held[rev] = Repo.open(self.repo, rev=rev, subrepos=True, uninitialized=True)
        return self._held[rev]

    def rows(self, rev: str | None = None) -> tuple[list[ExpRow], list[ExpRow]]:
        base = self._git("rev-parse", "--verify", "-q", f"{rev or 'HEAD'}^{{commit}}")[0]
        refs = self._git("for-each-ref", "--sort=committerdate",
                         "--format=%(objectname) %(refname)", "refs/exps/")
        found = [(sha, EXP_REF.fullmatch(ref)) for sha, _, ref in (r.partition(" ") for r in refs)]
        mine = [(sha, m[3]) for sha, m in found if m and m[1] + m[2] == base]
        if not mine:
            return [], []
        heads = self._git("branch", "--points-at", base, "--format=%(refname:short)")
        name = rev or next((h for h in heads if h), base[:7])
        return [ExpRow(exp, sha, name) for sha, exp in mine], [ExpRow(name, base, name)]

    def baseline_of(self, name: str) -> str | None:
        refs = self._git("for-each-ref", "--sort=-committerdate", "--format=%(refname)",
                         "refs/exps/")
        found = [m for m in map(EXP_REF.fullmatch, refs) if m and m[3] == name]
        return found[0][1] + found[0][2] if found else None   # the newest of that name

    def read(self, path: str, rev: str) -> bytes | None:
        from dvc.exceptions import DvcException, PathMissingError

        data = git_blob(rev, path, cwd=self.repo, cap=MAX_FILE_BYTES)
        if data is not None:
            return data
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
            raise SparkError(f"{path} at {rev} is larger than {MAX_FILE_BYTES} bytes; not read")
        return data


def read_yaml_at(source: Experiments, path: str, rev: str):
    """A YAML file at a rev, parsed with the bounded loader (None: no such file)."""
    data = source.read(path, rev)
    return None if data is None else load_yaml(data, f"{path} at {rev}")


def read_json_at(source: Experiments, path: str, rev: str, max_items: int = MAX_ITEMS):
    """A JSON file at a rev, parsed with the bounded loader (None: no such file)."""
    data = source.read(path, rev)
    return None if data is None else load_json(data, f"{path} at {rev}", max_items=max_items)


@dataclass(frozen=True)
class ExpRecord:
    """One experiment as its commit recorded it (compare and sweep start from it)."""
    row: ExpRow
    params: dict               # its params.yaml ({} when absent or not a mapping)
    metrics_path: str          # the job's eval.json
    metrics: dict | None       # None: see metrics_error
    metrics_error: str | None

    def job_file(self, name: str) -> str:
        return (job_dir(str(self.params.get("job"))) / name).as_posix()


def read_params(source: Experiments, rev: str) -> dict:
    """params.yaml at a rev ({} when absent or not a mapping)."""
    params = read_yaml_at(source, PARAMS_FILE, rev)
    return params if isinstance(params, dict) else {}


def read_record(source: Experiments, row: ExpRow) -> ExpRecord:
    """params.yaml and the job's eval.json at a rev; an eval.json missing or unreadable is
    recorded as why, not raised."""
    params = read_params(source, row.rev)
    path = (job_dir(str(params.get("job"))) / EVAL).as_posix()
    try:
        metrics = read_json_at(source, path, row.rev)
        error = None if isinstance(metrics, dict) else "not in the experiment"
    except SparkError as err:
        metrics, error = None, str(err)
    return ExpRecord(row, params, path, metrics if error is None else None, error)
