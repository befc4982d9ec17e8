"""dvc.lock as data: the outputs each stage recorded, and their copies in the DVC cache; a
stage stopped before it finished (Ctrl-C, SIGTERM, an error) puts back the outputs DVC removed
and says so on the one line (docs/pipeline.md). And the environment a tool subprocess (dvc,
spark, git) runs in, and a copy of the project in a fresh git repository: shared by
`spark repro-check`, tools/ and tests.

Last, DVC experiments as data, the one reader `spark compare` and `spark sweep` share: rows
from git's refs, YAML from git blobs through the bounded loader before DVC opens a rev,
outputs from the DVC cache; every read capped (docs/pipeline.md, "Sweep and compare")."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from sparktrain.core.errors import SparkError, first_line, printable
from sparktrain.core.fsutil import atomic_write_bytes, read_input
from sparktrain.core.jobfiles import EVAL, PARAMS_FILE, job_dir
from sparktrain.core.safeload import MAX_ITEMS, load_json, load_yaml

LOCK = "dvc.lock"
DEFAULT_CACHE = Path(".dvc/cache")
MD5 = re.compile(r"[0-9a-f]{32}")
GIT_TIMEOUT = 60      # seconds for one git call: a hung git is a line, not a hang
MAX_BLOB_BYTES = 16 * 2 ** 20   # a committed params.yaml or dvc.lock above this is refused


def git(*args: str, cwd: str | os.PathLike | None = None, text: bool = True,
        stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """`git ARGS` in `cwd`, captured, within GIT_TIMEOUT (one line if it hangs or is missing)."""
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=text,
                              input=stdin, timeout=GIT_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise SparkError(f"`{' '.join(('git',) + args)[:60]}` took over {GIT_TIMEOUT} s; "
                         "stopped") from None
    except OSError as err:
        raise SparkError(f"cannot run git: {err.strerror or err}") from None


def git_blob(rev: str, path: str, cwd: str | os.PathLike | None = None,
             cap: int = MAX_BLOB_BYTES) -> bytes | None:
    """`path` (from the root) at `rev` as git holds it, None when not; its size asked first,
    so a blob above `cap` is one line before a byte of it is read."""
    found = git("cat-file", "--batch-check", cwd=cwd, stdin=f"{rev}:{path}\n").stdout.split()
    if len(found) != 3 or found[1] != "blob":
        return None
    if int(found[2]) > cap:
        raise SparkError(f"{path} at {printable(rev)[:40]} is {int(found[2]):,} bytes, above the "
                         f"{cap:,}-byte limit; not read")
    shown = git("cat-file", "blob", found[0], cwd=cwd, text=False)
    if shown.returncode != 0:
        raise SparkError(f"cannot read {path} at {printable(rev)[:40]} from git")
    return shown.stdout


@dataclass(frozen=True)
class Output:
    path: str
    stage: str
    md5: str | None
    legacy: bool  # a DVC 2 lock entry (no `hash: md5`): the cache's old layout


def outputs(lock: dict) -> dict[str, Output]:
    """Every well-formed output of a parsed dvc.lock, by path; malformed ones skipped."""
    stages = lock.get("stages") if isinstance(lock, dict) else None
    found = {}
    for stage, entry in (stages.items() if isinstance(stages, dict) else ()):
        outs = entry.get("outs") if isinstance(entry, dict) else None
        for out in outs if isinstance(outs, list) else ():
            if not isinstance(out, dict) or not isinstance(out.get("path"), str):
                continue
            md5 = out.get("md5")
            found[out["path"]] = Output(out["path"], str(stage),
                                        md5 if isinstance(md5, str) else None, "hash" not in out)
    return found


def read_lock(path: str | os.PathLike = LOCK) -> dict:
    """dvc.lock parsed (bounded: no aliases, capped size), or {} when unreadable."""
    try:
        lock = load_yaml(read_input(path, "dvc.lock"), os.fspath(path)) or {}
    except SparkError:
        return {}
    return lock if isinstance(lock, dict) else {}


def cache_dir() -> Path:
    """The DVC cache of the repository in the current folder (`dvc cache dir`)."""
    try:
        listed = subprocess.run([sys.executable, "-m", "dvc", "cache", "dir"], capture_output=True,
                                text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"},
                                timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SparkError(f"`dvc cache dir` took over {GIT_TIMEOUT} s; stopped") from None
    found = listed.stdout.strip() if listed.returncode == 0 else ""
    return Path(found) if found else DEFAULT_CACHE


def cached_blob(out: Output, cache: Path) -> Path | None:
    """The cache file holding `out`'s recorded bytes, if the cache has it."""
    if not out.md5 or not MD5.fullmatch(out.md5):  # a ".dir" listing, or not a hash at all
        return None
    folder = cache if out.legacy else cache / "files" / "md5"
    blob = folder / out.md5[:2] / out.md5[2:]
    return blob if blob.is_file() else None


def confined(path: str, folder: str | os.PathLike) -> Path | None:
    """`path` when it is relative and inside `folder` (links resolved), else None: a crafted
    dvc.lock must not steer a write elsewhere."""
    if not path or os.path.isabs(path) or ".." in Path(path).parts:
        return None
    root, target = Path(folder).resolve(), Path(path).resolve()
    return Path(path) if target != root and root in target.parents else None


def restore_outputs(stage: str, folder: str | os.PathLike = ".") -> str:
    """Copy `stage`'s outputs inside `folder` back from the DVC cache when their md5 matches
    dvc.lock (DVC removes them before a run); a sentence for the user."""
    recorded = [o for o in outputs(read_lock()).values() if o.stage == stage]
    # dvc.lock made with another job: its outputs lie in a sibling job folder, never ours
    others = [o for o in recorded if confined(o.path, folder) is None
              and confined(o.path, Path(folder).parent) is not None]
    recorded = [o for o in recorded if o not in others]
    if not recorded:
        return "no earlier outputs recorded in dvc.lock" + (
            " for this job (it records another job's)" if others else "")
    cache, missing, refused = cache_dir(), [], []
    for out in recorded:
        target = confined(out.path, folder)
        if target is None:
            refused.append(out.path)
            continue
        blob = cached_blob(out, cache)
        try:
            data = read_input(blob, "file") if blob else None
        except SparkError:
            data = None
        if data is None or hashlib.md5(data).hexdigest() != out.md5:
            missing.append(out.path)
            continue
        if not target.is_file() or target.read_bytes() != data:
            atomic_write_bytes(target, data)
    note = (f"; dvc.lock names outputs outside {Path(folder).as_posix()}, not restored: "
            f"{', '.join(printable(p)[:80] for p in refused[:3])}" if refused else "")
    if missing:
        return (f"the previous outputs are not all in the DVC cache ({', '.join(missing)}); "
                f"`dvc pull {stage}` then `dvc checkout {stage}` brings them back{note}")
    return ("the previous outputs (as dvc.lock records them) were restored from the DVC cache"
            + note)


EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal number, as shells report it


class Terminated(BaseException):
    """SIGTERM, raised where the stage was, so its `finally` blocks run."""


def _raise_terminated(signum, frame):
    raise Terminated()


def on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _raise_terminated)


def restored_note(stage: str, folder: Callable[[], Path]) -> str:
    """"; <what the restore did>" when dvc.lock records outputs of `stage`, else "";
    `folder()` gives the job folder (it reads params.yaml, which may be what broke)."""
    try:
        where = folder()
    except SparkError:  # params.yaml is what broke: the error line already says how
        return (f"; `dvc checkout {stage}` brings back its previous outputs once params.yaml "
                f"is fixed" if any(o.stage == stage for o in outputs(read_lock()).values())
                else "")
    try:
        note = restore_outputs(stage, where)
    except (SparkError, OSError) as err:  # a disk still full
        return (f"; the previous outputs were not restored ({err}); "
                f"`dvc checkout {stage}` brings them back")
    return "" if note.startswith("no earlier outputs") else f"; {note}"


def interrupted(stage: str, signame: str, folder: Callable[[], Path]) -> int:
    """Restore (further signals ignored meanwhile), print one line; the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    note = restored_note(stage, folder) or "; no earlier outputs recorded in dvc.lock"
    print(f"stage {stage}: interrupted by {signame}{printable(note)}", file=sys.stderr)
    return EXIT[signame]


# Left behind by earlier runs or by the environment; never part of a copy.
NOT_COPIED = (".venv/", "out/", ".dvc/cache/", ".dvc/tmp/", "tmp/")
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "spark", "GIT_AUTHOR_EMAIL": "spark@localhost",
                "GIT_COMMITTER_NAME": "spark", "GIT_COMMITTER_EMAIL": "spark@localhost"}


def tool_env(repo: str | os.PathLike | None = None, extra: dict | None = None) -> dict:
    """os.environ with this interpreter's bin first on PATH (the stages' python), DVC
    analytics off, a git identity, and with `repo` its checkout first on PYTHONPATH."""
    env = {**GIT_IDENTITY, **os.environ}  # a git identity for commits, unless one is set
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["DVC_NO_ANALYTICS"] = "1"
    if repo is not None:
        env["PYTHONPATH"] = str(repo)
    env.update(extra or {})
    return env


def copy_project(root: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """A fresh one-commit git repository at `dest` holding the project's files (tracked and
    untracked-but-not-ignored, as git lists them)."""
    root, dest = Path(root), Path(dest)
    listed = git("ls-files", "-co", "--exclude-standard", "-z", cwd=root)
    if listed.returncode != 0:
        raise SparkError(f"{root} is not a git checkout of the project: {listed.stderr.strip()}")
    names = [n for n in listed.stdout.split("\0") if n]
    for name in sorted(n for n in names if not n.startswith(NOT_COPIED) and (root / n).is_file()):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "project copy"]):
        done = git("-c", "init.defaultBranch=main", *args, cwd=dest, env=tool_env())
        if done.returncode != 0:
            raise SparkError(f"git {args[0]} in {dest} failed: {done.stderr.strip()}")
    return dest


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
                read_yaml(self, name, rev)
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


def read_yaml(source: Experiments, path: str, rev: str):
    """A YAML file at a rev, parsed with the bounded loader (None: no such file)."""
    data = source.read(path, rev)
    return None if data is None else load_yaml(data, f"{path} at {rev}")


def read_json(source: Experiments, path: str, rev: str, max_items: int = MAX_ITEMS):
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
    params = read_yaml(source, PARAMS_FILE, rev)
    return params if isinstance(params, dict) else {}


def read_record(source: Experiments, row: ExpRow) -> ExpRecord:
    """params.yaml and the job's eval.json at a rev; an eval.json missing or unreadable is
    recorded as why, not raised."""
    params = read_params(source, row.rev)
    path = (job_dir(str(params.get("job"))) / EVAL).as_posix()
    try:
        metrics = read_json(source, path, row.rev)
        error = None if isinstance(metrics, dict) else "not in the experiment"
    except SparkError as err:
        metrics, error = None, str(err)
    return ExpRecord(row, params, path, metrics if error is None else None, error)
