"""The real dvc on temporary git copies of the project.

One template copy (committed, no out/) is made per session, and one fresh
`dvc repro` of it is shared: a test that changes something works on a `cp -a`
of that repro instead of running the pipeline again.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkhelp import HANG_GUARD_S, compile_code

from sparktrain.repro.toolenv import copy_project, tool_env as library_tool_env

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
TRAINING_STAGES = ("decode-bc", "tokenizer", "prepare", "train-status", "step", "eval")
STAGES = ("check-params",) + TRAINING_STAGES
DECLARED_NAMES = {"program.json", "status.json", "weights.safetensors", "checkpoint.json",
                  "ARTIFACT", "eval.json", "eval_detail.json", "loss.png", "tokenizer.json",
                  "corpus", "loss.tsv", "heldout_loss.tsv",
                  "heldout_bpb_64window_estimate.tsv", "lr.tsv", "metrics.json"}


def tool_env(repo: Path, extra: dict | None = None) -> dict:
    """The library's tool environment, with the venv's bin (not only this
    interpreter's) first on PATH and the copy's own package first on sys.path."""
    env = library_tool_env(repo, extra)
    if VENV_BIN.is_dir():
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env['PATH']}"
    return env


def run(repo: Path, *args: str, timeout: float = HANG_GUARD_S,
        env: dict | None = None) -> subprocess.CompletedProcess:
    """A command in `repo`, stdout and stderr together in .stdout."""
    return subprocess.run(list(args), cwd=repo, env=env or tool_env(repo),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def dvc(repo: Path, *args: str, check: bool = True, timeout: float = HANG_GUARD_S,
        env: dict | None = None):
    done = run(repo, "dvc", *args, timeout=timeout, env=env)
    if check:
        assert done.returncode == 0, f"dvc {' '.join(args)} exited {done.returncode}:\n{done.stdout}"
    return done


def dvc_json(repo: Path, *args: str):
    """The parsed stdout of `dvc ... --json`; dvc's warnings go to stderr."""
    done = subprocess.run(["dvc", *args, "--json"], cwd=repo, env=tool_env(repo),
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, f"dvc {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return json.loads(done.stdout)


def exp_revs(shown: list) -> list[dict]:
    """The experiments of a parsed `dvc exp show --json`: each rev entry with data
    (its "name", "rev" and "data": params, metrics, deps, outs)."""
    return [rev for base in shown for exp in base.get("experiments") or []
            for rev in exp.get("revs") or [] if rev.get("data")]


# eval.json's keys for a pairs job (the default one), DVC's metric; the first four are
# numbers always, copy_recall is null for held-out rows without copy probes
EVAL_METRICS = ("loss", "perplexity", "next_token_accuracy", "exact_match", "copy_recall")
NUMERIC_METRICS = EVAL_METRICS[:4]


def git(repo: Path, *args: str) -> str:
    done = run(repo, "git", *args)
    assert done.returncode == 0, f"git {' '.join(args)}:\n{done.stdout}"
    return done.stdout


def ran_stages(output: str) -> set[str]:
    return set(re.findall(r"^Running stage '([^']+)'", output, flags=re.M))


def clone(src: Path, dest: Path) -> Path:
    """`cp -a`: the repository with its out/, cache and lock, as they are."""
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    return dest


def shared_checkout(template_repo: Path, root: Path) -> Path:
    """A driver checkout under `root` whose `origin` is a bare repo and whose default DVC
    remote is a local folder, committed and pushed: what a cluster's workers clone
    (spark sweep's and spark tune's tests)."""
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main",
                    str(root / "origin.git")], check=True)
    repo = clone(template_repo, root / "driver")
    dvc(repo, "remote", "add", "-d", "store", str(root / "dvc-store"))
    git(repo, "add", ".dvc/config")
    git(repo, "commit", "-q", "-m", "shared DVC remote")
    git(repo, "remote", "add", "origin", str(root / "origin.git"))
    git(repo, "push", "-q", "origin", "main")
    return repo


def _lookup(params: dict, dotted: str):
    value = params
    for part in dotted.split("."):
        value = value[part]
    return value


OUT_KINDS = ("outs", "metrics", "plots")


def stage_paths(repo: Path, kinds=OUT_KINDS) -> dict[str, list[str]]:
    """Per stage, the paths of dvc.yaml's `kinds` entries, ${...} filled from params.yaml."""
    pipeline = yaml.safe_load((repo / "dvc.yaml").read_text())
    params = yaml.safe_load((repo / "params.yaml").read_text())
    found = {}
    for name, stage in pipeline["stages"].items():
        paths = []
        for kind in kinds:
            for entry in stage.get(kind) or []:
                path = entry if isinstance(entry, str) else next(iter(entry))
                paths.append(re.sub(r"\$\{([^}]+)\}", lambda m: str(_lookup(params, m[1])), path))
        found[name] = paths
    return found


def declared_outputs(repo: Path) -> list[str]:
    """Every outs/metrics/plots path of dvc.yaml, with ${...} filled from params.yaml."""
    return sorted(p for paths in stage_paths(repo).values() for p in paths)


def sha256_of(repo: Path, paths) -> dict[str, str]:
    """sha256 of each declared output; a folder output (corpus/) hashes its files by name."""
    out = {}
    for p in paths:
        path = repo / p
        files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
        h = hashlib.sha256()
        for f in files:
            h.update(f.relative_to(path).as_posix().encode() + b"\0" if path.is_dir() else b"")
            h.update(hashlib.sha256(f.read_bytes()).digest())
        out[p] = h.hexdigest()
    return out


def lock_outs(lock: dict) -> dict[str, tuple[str, str]]:
    """path -> (stage, md5) for every output in a parsed dvc.lock."""
    return {out["path"]: (stage, out["md5"])
            for stage, entry in lock["stages"].items() for out in entry.get("outs") or []}


@pytest.fixture(scope="session")
def template_repo(tmp_path_factory) -> Path:
    """The project's files, committed in a new git repo; nothing run yet. Its code is
    byte-compiled (ignored by git and DVC), so each copy's stages start from the cache."""
    repo = copy_project(REPO, tmp_path_factory.mktemp("template") / "repo")
    compile_code(repo)
    return repo


@pytest.fixture(scope="session")
def fresh_repro(template_repo, tmp_path_factory):
    """(repo, output) of one `dvc repro` in a fresh copy; tests only read it."""
    repo = clone(template_repo, tmp_path_factory.mktemp("fresh") / "repo")
    done = dvc(repo, "repro")
    return repo, done.stdout


@pytest.fixture
def repro_copy(fresh_repro, tmp_path) -> Path:
    """A private `cp -a` of the fresh repro, free to change."""
    return clone(fresh_repro[0], tmp_path / "repo")


@pytest.fixture
def template_copy(template_repo, tmp_path) -> Path:
    return clone(template_repo, tmp_path / "repo")
