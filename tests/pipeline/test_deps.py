"""Every file a stage's process imports or reads is one of its DVC deps (or outs),
DVC notices when any of them changes, and an edit to a module re-runs only the
stages that import it (the model's layers: step and eval; `spark repro-check`
and `spark compare`: none).

Each stage runs under tracer_site/sitecustomize.py (put first on PYTHONPATH): it
records the project modules in sys.modules at exit and every file opened for
reading (the "open" audit event). The checker compares that with dvc.yaml.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkhelp import HANG_GUARD_S

from .conftest import VENV_BIN, clone, dvc, stage_paths, tool_env

pytestmark = pytest.mark.e2e

TRACER = Path(__file__).resolve().parent / "tracer_site"
# Never inputs: DVC's own state, git's, and byte-code caches.
NOT_INPUTS = (".dvc/", ".git/")


def traced_repro(repo: Path, trace_dir: Path, *args: str) -> dict[str, set[str]]:
    """Run `dvc repro --force ARGS` under the tracer; per stage, the repo-relative
    files its process imported or read."""
    trace_dir.mkdir()
    env = tool_env(repo, {"PYTHONPATH": f"{TRACER}{os.pathsep}{repo}",
                          "SPARK_TRACE_DIR": str(trace_dir)})
    dvc(repo, "repro", "--force", *args, env=env)
    pipeline = yaml.safe_load((repo / "dvc.yaml").read_text())
    by_module = {stage["cmd"].split()[-1].replace(".", "/") + ".py": name
                 for name, stage in pipeline["stages"].items()}
    used: dict[str, set[str]] = {}
    root = repo.resolve()
    for record_file in trace_dir.glob("*.json"):
        record = json.loads(record_file.read_text())
        script = Path(record["argv"][0]).resolve() if record["argv"] else None
        if script is None or root not in script.parents:
            continue  # dvc, git and other helper processes
        stage = by_module.get(script.relative_to(root).as_posix())
        if stage is None:
            continue
        files = used.setdefault(stage, set())
        for path in record["modules"] + record["opened"]:
            p = Path(path)
            if root not in p.parents or "__pycache__" in p.parts or not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            if not rel.startswith(NOT_INPUTS):
                files.add(rel)
    return used


def undeclared(repo: Path, used: dict[str, set[str]]) -> list[str]:
    """'stage: file' for each used file that no dep or out of the stage covers."""
    deps = stage_paths(repo, ("deps",))
    outs = stage_paths(repo)
    pipeline = yaml.safe_load((repo / "dvc.yaml").read_text())
    problems = []
    for stage, files in sorted(used.items()):
        covers = [p.rstrip("/") for p in deps[stage] + outs[stage]]
        for rel in sorted(files):
            if rel == "params.yaml":
                ok = bool(pipeline["stages"][stage].get("params"))
            else:
                ok = any(rel == c or rel.startswith(c + "/") for c in covers)
            if not ok:
                problems.append(f"{stage}: {rel}")
    return problems


# Appends a comment to each file in turn and asks DVC which stages changed; and
# names every used file that .dvcignore hides from DVC (a change there goes unseen).
_TOUCH = """
import json, sys
from dvc.repo import Repo
plan, used = json.loads(sys.argv[1]), json.loads(sys.argv[2])
repo = Repo(".")
ignored = [rel for rel in used if repo.dvcignore.is_ignored(repo.fs, repo.fs.join(repo.root_dir, rel))]
seen = {}
for rel in plan:
    original = open(rel, "rb").read()
    try:
        with open(rel, "ab") as f:
            f.write(b"\\n# touched by test_deps\\n")
        seen[rel] = sorted(name.split(":")[-1] for name in repo.status())
    finally:
        open(rel, "wb").write(original)
print(json.dumps({"changed": seen, "ignored": ignored}))
"""


def touch_plan(repo: Path, used: dict[str, set[str]]) -> dict[str, dict[str, str]]:
    """stage -> {dep entry: one used file under it}. DVC hashes a folder dep whole,
    so an edit of one file under an entry stands for every file under it (the
    ignored-files check covers the rest): a few dozen `dvc status` calls, not one
    per file."""
    deps = stage_paths(repo, ("deps",))
    plan: dict[str, dict[str, str]] = {}
    for stage, files in used.items():
        for rel in sorted(files):
            entry = next((d.rstrip("/") for d in deps[stage]
                          if rel == d.rstrip("/") or rel.startswith(d.rstrip("/") + "/")), None)
            if entry is not None:
                plan.setdefault(stage, {}).setdefault(entry, rel)
    return plan


@pytest.fixture(scope="module")
def traced(fresh_repro, tmp_path_factory):
    repo = clone(fresh_repro[0], tmp_path_factory.mktemp("traced") / "repo")
    return repo, traced_repro(repo, tmp_path_factory.mktemp("trace") / "t")


def test_every_stage_was_traced(traced):
    repo, used = traced
    pipeline = yaml.safe_load((repo / "dvc.yaml").read_text())
    assert set(used) == set(pipeline["stages"])
    assert "stages/step.py" in used["step"] and "sparktrain/train/loop.py" in used["step"]
    assert "data/train/dataset.jsonl" in used["train-status"]


def test_every_file_a_stage_uses_is_declared(traced):
    repo, used = traced
    assert undeclared(repo, used) == []


def touched(repo: Path, files: list[str], used: list[str]) -> dict:
    """_TOUCH's report: per file in `files`, the stages `dvc status` names after a comment is
    appended to it; and the `used` files .dvcignore hides."""
    python = VENV_BIN / "python" if VENV_BIN.is_dir() else "python"
    # a hang guard only: the edits take under a minute on two quiet cores
    done = subprocess.run([str(python), "-c", _TOUCH, json.dumps(files), json.dumps(used)],
                          cwd=repo, env=tool_env(repo), capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_dvc_notices_a_change_in_every_file_a_stage_uses(traced):
    repo, used = traced
    # params.yaml is tracked by key, not by bytes: a comment changes no param
    # (test_repro checks that editing a key re-runs exactly its stages)
    used = {stage: files - {"params.yaml"} for stage, files in used.items()}
    plan = touch_plan(repo, used)
    files = sorted({rel for entries in plan.values() for rel in entries.values()})
    report = touched(repo, files, sorted({f for fs in used.values() for f in fs}))
    assert report["ignored"] == [], f".dvcignore hides files the stages use: {report['ignored']}"
    missed = [f"{stage}: {rel}" for stage, entries in sorted(plan.items())
              for rel in sorted(entries.values()) if stage not in report["changed"][rel]]
    assert missed == [], f"an appended comment did not make dvc status report: {missed}"


# An edit and the stages it may re-run, no more (STYLE: a stage imports what it runs):
# the model's layers only where the model runs; the repro check and `spark compare`
# run in no stage. Editing the model must never re-train the tokenizer.
NARROW = {"sparktrain/model/layers.py": ["eval", "step"],
          "sparktrain/repro/check.py": [],
          "sparktrain/eval/compare.py": []}


def test_an_edit_reruns_only_the_stages_that_import_it(traced):
    repo, used = traced
    # the tracer first: which stages' processes really loaded each file
    assert {rel: sorted(s for s, files in used.items() if rel in files)
            for rel in NARROW} == NARROW
    # then DVC: which stages `dvc status` calls changed after the edit
    assert touched(repo, sorted(NARROW), [])["changed"] == NARROW


def test_an_undeclared_import_is_caught(fresh_repro, tmp_path):
    """The checker's own test: a stage that imports a module no dep covers fails it."""
    repo = clone(fresh_repro[0], tmp_path / "repo")
    (repo / "sparktrain" / "undeclared_helper.py").write_text("HELLO = 1\n")
    script = repo / "stages" / "eval.py"
    script.write_text("import sparktrain.undeclared_helper  # noqa: F401\n" + script.read_text())
    used = traced_repro(repo, tmp_path / "trace", "-s", "eval")
    assert "eval: sparktrain/undeclared_helper.py" in undeclared(repo, used)
