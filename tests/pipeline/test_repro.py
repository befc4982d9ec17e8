"""`dvc repro` from a fresh clone, what each kind of change re-runs, and that the
outputs are byte-identical run after run (and match the committed dvc.lock)."""
from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import pytest
import yaml

from sparktrain.repro.check import compare_locks
from sparktrain.repro.dvclock import Output, cached_blob

from .conftest import (DECLARED_NAMES, REPO, STAGES, TRAINING_STAGES, clone, declared_outputs, dvc, git,
                       lock_outs, ran_stages, run, sha256_of)

pytestmark = pytest.mark.e2e

# Losses and metrics may move this much (relative) on a CPU unlike the recorder's.
FLOAT_TOLERANCE = 1e-4


def test_fresh_repro_runs_every_stage_and_writes_every_declared_output(fresh_repro):
    repo, output = fresh_repro
    # check-params writes nothing: a clone whose dvc.lock records its inputs skips it
    assert ran_stages(output) == set(TRAINING_STAGES), output
    declared = declared_outputs(repo)
    assert {p.rsplit("/", 1)[1] for p in declared} == DECLARED_NAMES
    for path in declared:
        # corpus/ is a folder output: a pairs job's holds files.json naming the dataset
        files = sorted((repo / path).iterdir()) if (repo / path).is_dir() else [repo / path]
        assert files and all(f.is_file() and f.stat().st_size > 0 for f in files), path
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert set(lock_outs(lock)) == set(declared), "dvc.lock records exactly the declared outputs"
    assert "perf.json" not in {p.rsplit("/", 1)[1] for p in declared}


def test_second_repro_runs_nothing(repro_copy):
    done = dvc(repro_copy, "repro")
    assert ran_stages(done.stdout) == set(), done.stdout
    assert "is cached" not in done.stdout
    assert "Data and pipelines are up to date." in done.stdout


def _edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not exactly once in {path}"
    path.write_text(text.replace(old, new))


def test_changing_lr_reruns_step_and_eval_only(repro_copy):
    params = yaml.safe_load((repro_copy / "params.yaml").read_text())
    old_lr = params["step"]["lr"]
    new_lr = 0.05 if old_lr != 0.05 else 0.02
    _edit(repro_copy / "params.yaml", f"  lr: {old_lr}", f"  lr: {new_lr}")
    done = dvc(repro_copy, "repro")
    # check-params tracks the whole params.yaml; of the training stages, only step and eval
    assert ran_stages(done.stdout) == {"check-params", "step", "eval"}, done.stdout


def test_editing_the_dataset_reruns_train_status_onward(repro_copy):
    dataset = repro_copy / "data" / "train" / "dataset.jsonl"
    row = {"messages": [{"role": "user", "content": "what comes after 3?"},
                        {"role": "assistant", "content": "4"}]}
    with dataset.open("a") as f:
        f.write(json.dumps(row) + "\n")
    done = dvc(repro_copy, "repro")
    # tokenizer and prepare read it too (a BPE is trained on a pairs job's rows)
    assert ran_stages(done.stdout) == {"tokenizer", "prepare", "train-status", "step", "eval"}, \
        done.stdout


def test_editing_the_program_reruns_everything(repro_copy):
    params = yaml.safe_load((repro_copy / "params.yaml").read_text())
    compiled = repro_copy / params["program"]
    source = compiled.with_suffix(".spark")
    text = source.read_text()
    assert "\nprint job" in text, "the default program ends with `print job`"
    source.write_text(text.replace("\nprint job", "\nprint status"))
    before = compiled.read_bytes()
    made = run(repro_copy, "spark", "compile", str(source), "-o", str(compiled))
    assert made.returncode == 0, made.stdout
    assert compiled.read_bytes() != before
    done = dvc(repro_copy, "repro")
    assert ran_stages(done.stdout) == set(TRAINING_STAGES), done.stdout


@pytest.fixture(scope="module")
def head_clone(tmp_path_factory) -> Path:
    """A plain `git clone` of HEAD after one `dvc repro`; tests only read it."""
    repo = tmp_path_factory.mktemp("head") / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True)
    dvc(repo, "repro")
    return repo


def _tree_is_head() -> bool:
    """True when the checkout's files are its HEAD's (nothing changed, nothing untracked):
    a clone of HEAD is then a fresh copy of the very files `fresh_repro` copied."""
    done = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                          text=True)
    return done.returncode == 0 and done.stdout == ""


def test_two_fresh_clones_give_byte_identical_outputs(fresh_repro, request):
    first, _ = fresh_repro
    # the second fresh clone: the HEAD clone that test_committed_lock_is_reproduced
    # repros anyway (one pipeline run less), or, in a changed checkout, a copy of its files
    if _tree_is_head():
        second = request.getfixturevalue("head_clone")
    else:
        second = request.getfixturevalue("template_copy")
        dvc(second, "repro")
    declared = declared_outputs(first)
    assert sha256_of(first, declared) == sha256_of(second, declared)
    for repo in (first, second):
        assert dvc(repo, "status", "-q", check=False).returncode == 0


def _committed_blob(out: Output) -> bytes | None:
    """The committed output from the lead's DVC cache, when it is there."""
    blob = cached_blob(out, REPO / ".dvc" / "cache")
    return blob.read_bytes() if blob else None


def test_committed_lock_is_reproduced(request):
    shown = subprocess.run(["git", "show", "HEAD:dvc.lock"], cwd=REPO, capture_output=True,
                           text=True)
    if shown.returncode != 0:
        pytest.skip(f"no dvc.lock committed at HEAD of {REPO}: commit one after a clean "
                    f"`dvc repro` to enable this check")
    committed = yaml.safe_load(shown.stdout)
    # A plain clone of HEAD: the very inputs that recorded the committed lock.
    repo = request.getfixturevalue("head_clone")
    assert dvc(repo, "status", "-q", check=False).returncode == 0
    fresh = yaml.safe_load((repo / "dvc.lock").read_text())
    # The same comparison as `spark repro-check`: inputs must match, decode-bc and
    # train-status outputs exactly, step/eval floats within the tolerance (BLAS
    # kernels differ between CPU families).
    verdict = compare_locks(committed, fresh, FLOAT_TOLERANCE, _committed_blob,
                            lambda out: (repo / out.path).read_bytes())
    missing = [line for line in verdict.lines if "not in the DVC cache" in line]
    if missing:
        pytest.skip(f"hashes moved on this machine and the committed copies are not in "
                    f"{REPO}/.dvc/cache to compare numbers: {missing[0]}")
    assert verdict.within_tolerance, "\n".join(verdict.lines)
    if not verdict.exact:
        warnings.warn(f"float outputs moved within {FLOAT_TOLERANCE:g} on this machine "
                      f"(another CPU family than the recorder?): {verdict.lines}")


def test_status_is_clean_after_a_repro_and_git_sees_only_the_lock(fresh_repro, tmp_path):
    repo = clone(fresh_repro[0], tmp_path / "repo")
    assert dvc(repo, "status", "-q", check=False).returncode == 0
    changed = {line[3:] for line in git(repo, "status", "--porcelain").splitlines()}
    assert changed <= {"dvc.lock"}, f"outputs must be git-ignored by dvc: {changed}"
