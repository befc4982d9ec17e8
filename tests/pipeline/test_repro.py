"""`dvc repro` from a fresh clone, what each kind of change re-runs, and that the
outputs are byte-identical run after run (and match the committed dvc.lock)."""
from __future__ import annotations

import json
import subprocess
import warnings

import pytest
import yaml

from sparktrain.reprocheck import FLOAT_OUTPUT_NAMES, Output, compare_output, moved_inputs

from .conftest import (DECLARED_NAMES, REPO, STAGES, clone, declared_outputs, dvc, git,
                       lock_outs, ran_stages, run, sha256_of)

pytestmark = pytest.mark.e2e

# Losses and metrics may move this much (relative) on a CPU unlike the recorder's.
FLOAT_TOLERANCE = 1e-4


def test_fresh_repro_runs_every_stage_and_writes_every_declared_output(fresh_repro):
    repo, output = fresh_repro
    assert ran_stages(output) == set(STAGES), output
    declared = declared_outputs(repo)
    assert {p.rsplit("/", 1)[1] for p in declared} == DECLARED_NAMES
    for path in declared:
        assert (repo / path).is_file() and (repo / path).stat().st_size > 0, path
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
    assert ran_stages(done.stdout) == {"step", "eval"}, done.stdout


def test_editing_the_dataset_reruns_train_status_onward(repro_copy):
    dataset = repro_copy / "data" / "train" / "dataset.jsonl"
    row = {"messages": [{"role": "user", "content": "what comes after 3?"},
                        {"role": "assistant", "content": "4"}]}
    with dataset.open("a") as f:
        f.write(json.dumps(row) + "\n")
    done = dvc(repro_copy, "repro")
    assert ran_stages(done.stdout) == {"train-status", "step", "eval"}, done.stdout


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
    assert ran_stages(done.stdout) == set(STAGES), done.stdout


def test_two_fresh_clones_give_byte_identical_outputs(fresh_repro, template_copy):
    first, _ = fresh_repro
    dvc(template_copy, "repro")
    declared = declared_outputs(first)
    assert sha256_of(first, declared) == sha256_of(template_copy, declared)
    for repo in (first, template_copy):
        assert dvc(repo, "status", "-q", check=False).returncode == 0


def _committed_blob(out: Output) -> bytes | None:
    """The committed output from the lead's DVC cache, when it is there."""
    blob = REPO / ".dvc" / "cache" / "files" / "md5" / out.md5[:2] / out.md5[2:]
    return blob.read_bytes() if blob.is_file() else None


def test_committed_lock_is_reproduced(tmp_path):
    shown = subprocess.run(["git", "show", "HEAD:dvc.lock"], cwd=REPO, capture_output=True,
                           text=True)
    if shown.returncode != 0:
        pytest.skip(f"no dvc.lock committed at HEAD of {REPO}: commit one after a clean "
                    f"`dvc repro` to enable this check")
    committed = yaml.safe_load(shown.stdout)
    # A plain clone of HEAD: the very inputs that recorded the committed lock.
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True)
    dvc(repo, "repro")
    assert dvc(repo, "status", "-q", check=False).returncode == 0
    fresh = yaml.safe_load((repo / "dvc.lock").read_text())
    # Sources, params and commands: the same, or the committed lock is stale.
    assert not moved_inputs(committed, fresh)

    old, new = lock_outs(committed), lock_outs(fresh)
    assert set(old) == set(new)
    moved = sorted(p for p in old if old[p] != new[p])
    exact_stages = {"decode-bc", "train-status"}
    assert not [p for p in moved if old[p][0] in exact_stages], \
        f"outputs of decode-bc/train-status must be reproduced exactly: {moved}"
    if not moved:
        return
    # step/eval floats come from BLAS, whose kernels differ between CPU families.
    for path in moved:
        stage, md5 = old[path]
        if path.endswith(".png"):
            continue
        assert path.endswith(FLOAT_OUTPUT_NAMES), f"{path} (stage {stage}) is not a float output"
        blob = _committed_blob(Output(path, stage, md5, legacy=False))
        if blob is None:
            pytest.skip(f"hashes moved on this machine ({', '.join(moved)}) and the committed "
                        f"{path} is not in {REPO}/.dvc/cache to compare its numbers")
        worst, other = compare_output(path, blob, (repo / path).read_bytes())
        assert not other, f"{path}: non-numeric change {other[:3]}"
        assert worst <= FLOAT_TOLERANCE, f"{path}: max relative error {worst:.3g}"
    warnings.warn(f"float outputs moved within {FLOAT_TOLERANCE:g} on this machine "
                  f"(another CPU family than the recorder?): {', '.join(moved)}")


def test_status_is_clean_after_a_repro_and_git_sees_only_the_lock(fresh_repro, tmp_path):
    repo = clone(fresh_repro[0], tmp_path / "repo")
    assert dvc(repo, "status", "-q", check=False).returncode == 0
    changed = {line[3:] for line in git(repo, "status", "--porcelain").splitlines()}
    assert changed <= {"dvc.lock"}, f"outputs must be git-ignored by dvc: {changed}"
