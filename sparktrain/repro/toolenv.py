"""Running the tools a project copy needs as subprocesses: git within a timeout (a file
at a rev, read by its size first), the environment a tool (dvc, spark, git) runs in, and a
copy of the project in a fresh git repository; shared by `spark repro-check`, `spark sweep`,
tools/ and tests (docs/pipeline.md)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sparktrain.core.errors import SparkError, printable

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


# Left behind by earlier runs or by the environment; never part of a copy.
NOT_COPIED = (".venv/", "out/", ".dvc/cache/", ".dvc/tmp/", "tmp/")
DVC_CONFIG = ".dvc/config"
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


def without_remotes(config: str) -> str:
    """A .dvc/config's text less its remotes: every `['remote "NAME"']` section and
    `[core]`'s `remote = NAME` line."""
    kept, section = [], ""
    for line in config.splitlines(keepends=True):
        head = line.strip()
        if head.startswith("["):
            section = head
        is_remote = section.startswith(("['remote ", '["remote ', "[remote "))
        if not is_remote and not (section == "[core]" and head.split("=")[0].strip() == "remote"):
            kept.append(line)
    return "".join(kept)


def copy_project(root: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """A fresh one-commit git repository at `dest` holding the project's files (tracked and
    untracked-but-not-ignored, as git lists them). The copy is a scratch project: it gets
    no DVC remote of the user's (README's "Share results" commits one), so nothing a tool
    or test does in it pushes there or meets a remote name already taken."""
    root, dest = Path(root), Path(dest)
    listed = git("ls-files", "-co", "--exclude-standard", "-z", cwd=root)
    if listed.returncode != 0:
        raise SparkError(f"{root} is not a git checkout of the project: {listed.stderr.strip()}")
    names = [n for n in listed.stdout.split("\0") if n]
    for name in sorted(n for n in names if not n.startswith(NOT_COPIED) and (root / n).is_file()):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    config = dest / DVC_CONFIG
    if config.is_file():
        config.write_text(without_remotes(config.read_text(encoding="utf-8")), encoding="utf-8")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "project copy"]):
        done = git("-c", "init.defaultBranch=main", *args, cwd=dest, env=tool_env())
        if done.returncode != 0:
            raise SparkError(f"git {args[0]} in {dest} failed: {done.stderr.strip()}")
    return dest
