"""A pull request's report made the way `.github/workflows/pr-report.yml` makes it, on this
machine: a repository with a base branch (its lock committed after a repro) and a branch
`pr` that changes one param, a fresh clone of `pr`, then the workflow's own `run:` steps,
read from the YAML, with `gh` a stand-in that keeps the comment's body. Shared by the
workflow's test (tests/pipeline/test_ci_workflows.py) and the `ci-report` figure of
tools/readme_figures.py (docs/ci.md, docs/tools.md "README figures")."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sparktrain.core.safeload import load_yaml
from sparktrain.repro.toolenv import tool_env

ROOT = Path(__file__).resolve().parents[1]
PR_WORKFLOW = ROOT / ".github" / "workflows" / "pr-report.yml"
BASE = "origin/main"
# the one change the pull request makes (params.yaml's line, before and after)
PR_CHANGE = ("  lr: 0.03 ", "  lr: 0.05 ")
FAKE_GH = """#!/usr/bin/env bash
# gh's stand-in: keep the arguments and the --body-file's text
printf '%s\\n' "$@" > "$GH_OUT/args"
while [ $# -gt 0 ]; do
  if [ "$1" = --body-file ]; then cp "$2" "$GH_OUT/body.md"; fi
  shift
done
"""


@dataclass(frozen=True)
class PullRequestRun:
    repo: Path            # the runner's clone of `pr`, after every step
    ran: list[str]        # the names of the `run:` steps, in order
    gh_args: list[str]    # what the last step passed to gh
    body: str             # the report gh was given


def steps(path: Path = PR_WORKFLOW) -> list[dict]:
    """The steps of a workflow's one job, as the YAML lists them."""
    [job] = load_yaml(path.read_text(), path.name)["jobs"].values()
    return job["steps"]


def _must(cwd: Path, *cmd: str, env: dict | None = None, timeout: float = 3600) -> str:
    """stdout+stderr of a command that must succeed; a failure is one SystemExit with its tail."""
    done = subprocess.run(list(cmd), cwd=cwd, env=env or _env(cwd, {}), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)[:80]} exited {done.returncode}:\n{done.stdout[-3000:]}")
    return done.stdout


def _env(repo: Path, extra: dict, venv_bin: Path = ROOT / ".venv" / "bin") -> dict:
    """The tool environment with the project's venv first on PATH (its dvc, its spark)."""
    env = tool_env(repo, extra)
    env["PATH"] = f"{venv_bin}{os.pathsep}{env['PATH']}"
    return env


def pushed_branches(fresh: Path, root: Path) -> Path:
    """root/origin.git with main (`fresh`, a repro'd copy, its lock committed) and `pr`,
    which makes PR_CHANGE in params.yaml and commits the lock its repro wrote."""
    work = root / "work"
    subprocess.run(["cp", "-a", str(fresh), str(work)], check=True)
    _must(work, "git", "add", "-A")
    _must(work, "git", "commit", "-q", "--allow-empty", "-m", "main's lock")
    _must(root, "git", "init", "-q", "--bare", str(root / "origin.git"))
    _must(work, "git", "remote", "add", "origin", str(root / "origin.git"))
    _must(work, "git", "push", "-q", "origin", "main")
    _must(work, "git", "checkout", "-q", "-b", "pr")
    params = work / "params.yaml"
    params.write_text(params.read_text().replace(*PR_CHANGE, 1))
    _must(work, "dvc", "repro")
    _must(work, "git", "commit", "-q", "-am", "lr 0.05")
    _must(work, "git", "push", "-q", "origin", "pr")
    return root / "origin.git"


def _venv_stand_in(repo: Path, project: Path) -> None:
    """The project's venv seen from the clone's .venv, as a cached one would be: `make
    setup` finds it working and up to date, so it installs nothing (no registry here)."""
    venv = repo / ".venv"
    venv.mkdir()
    shutil.copy(project / ".venv" / "pyvenv.cfg", venv)
    for name in ("bin", "lib"):
        (venv / name).symlink_to(project / ".venv" / name)
    (venv / ".installed-stamp").touch()
    page = project / "build" / "dvc-plots.html"
    if page.is_file():
        (repo / "build").mkdir()
        shutil.copy(page, repo / "build")


def run_workflow(fresh: Path, root: Path, project: Path = ROOT,
                 timeout: float = 3600) -> PullRequestRun:
    """The pull-request workflow's `run:` steps in a fresh clone of `pr` under `root`,
    against BASE; the first step that fails is a SystemExit naming it."""
    root.mkdir(parents=True, exist_ok=True)
    origin = pushed_branches(fresh, root)
    repo = root / "ci"
    _must(root, "git", "clone", "-q", "-b", "pr", str(origin), str(repo))
    _venv_stand_in(repo, project)
    gh = root / "gh-bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(FAKE_GH)
    gh.chmod(0o755)
    (root / "runner").mkdir()
    env = _env(repo, {"BASE": BASE, "PR": "7", "GH_TOKEN": "none", "GH_OUT": str(root),
                      "RUNNER_TEMP": str(root / "runner"), "GITHUB_WORKSPACE": str(repo)},
               project / ".venv" / "bin")
    env["PATH"] = f"{gh.parent}{os.pathsep}{env['PATH']}"
    ran = []
    for step in (s for s in steps() if "run" in s):
        script = root / "step.sh"
        script.write_text(step["run"])
        try:
            _must(repo, "bash", "--noprofile", "--norc", "-e", str(script), env=env,
                  timeout=timeout)
        except SystemExit as err:
            raise SystemExit(f"step {step['name']!r}: {err}") from None
        ran.append(step["name"])
    return PullRequestRun(repo, ran, (root / "args").read_text().split("\n"),
                          (root / "body.md").read_text())
