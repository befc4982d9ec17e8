"""The environment a tool subprocess (dvc, spark, git) runs in, and a copy of the
project in a fresh git repository: shared by `spark repro-check`, tools/ and tests."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from sparktrain.core.errors import SparkError
from sparktrain.repro.lock import git

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
