"""`spark repro-check`: the comparison on its own, then the whole
check on a copy whose lock was committed after a repro."""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from sparktrain.repro.check import compare_json, compare_locks

from .conftest import git, run

LOCK = {"stages": {
    "decode-bc": {"cmd": "python -m stages.decode_bc",
                  "deps": [{"path": "data/p.sparkbc", "md5": "p0"}],
                  "outs": [{"path": "out/program.json", "hash": "md5", "md5": "a0"}]},
    "eval": {"cmd": "python -m stages.eval",
             "deps": [{"path": "out/program.json", "md5": "a0"}],
             "outs": [{"path": "out/eval.json", "hash": "md5", "md5": "e0"},
                      {"path": "out/loss.png", "hash": "md5", "md5": "g0"}]},
}}
EVAL = {"loss": 4.75620, "families": {"chat": {"loss": 4.1157}}, "n": 10,
        "weights_sha256": "aa" * 32, "samples": ["hi"]}


def _moved(**md5s) -> dict:
    lock = copy.deepcopy(LOCK)
    for stage in lock["stages"].values():
        for item in stage["outs"] + stage["deps"]:
            name = item["path"].rsplit("/", 1)[1]
            item["md5"] = md5s.get(name.replace(".", "_"), item["md5"])
    return lock


def _verdict(new_lock, new_eval, tolerance=1e-4):
    return compare_locks(LOCK, new_lock, tolerance,
                         read_old=lambda out: json.dumps(EVAL).encode(),
                         read_new=lambda out: json.dumps(new_eval).encode())


def test_identical_locks_are_exact():
    verdict = _verdict(copy.deepcopy(LOCK), EVAL)
    assert verdict.exact and not verdict.lines


def test_float_drift_within_tolerance_names_the_output_and_stage():
    drifted = dict(EVAL, loss=4.75620 * (1 + 1e-6), weights_sha256="bb" * 32)
    verdict = _verdict(_moved(eval_json="e1", loss_png="g1"), drifted)
    assert not verdict.exact and verdict.within_tolerance
    assert any("out/eval.json (stage eval)" in ln and "within tolerance" in ln
               for ln in verdict.lines), verdict.lines
    assert any("out/loss.png (stage eval)" in ln for ln in verdict.lines)


def test_float_drift_beyond_tolerance_fails():
    drifted = dict(EVAL, families={"chat": {"loss": 4.2}})
    verdict = _verdict(_moved(eval_json="e1"), drifted)
    assert not verdict.within_tolerance
    assert "beyond tolerance" in verdict.lines[0]


def test_a_non_float_output_moving_fails():
    verdict = _verdict(_moved(program_json="a1"), EVAL)
    assert not verdict.within_tolerance
    assert any("out/program.json (stage decode-bc)" in ln for ln in verdict.lines)


def test_a_text_change_in_a_metrics_file_fails():
    verdict = _verdict(_moved(eval_json="e1"), dict(EVAL, samples=["ho"]))
    assert not verdict.within_tolerance and "non-numeric" in verdict.lines[0]


def test_a_moved_source_dep_is_named():
    lock = copy.deepcopy(LOCK)
    lock["stages"]["decode-bc"]["deps"][0]["md5"] = "p1"
    verdict = _verdict(lock, EVAL)
    assert verdict.lines == ["input moved: stage decode-bc: deps differs from the committed lock"]


def test_relative_comparison_of_numbers():
    assert compare_json({"a": [1.0, 0.0]}, {"a": [1.0 + 1e-9, 0.0]})[0] < 1e-8
    assert compare_json({"a": 2.0}, {"a": 1.0})[0] == 0.5
    assert compare_json({"a": 1}, {"b": 1})[1]


def _reprocheck(cwd, *args):
    return run(cwd, "spark", "repro-check", *args)


def test_outside_a_git_repo_is_a_one_line_error(tmp_path):
    done = _reprocheck(tmp_path)
    assert done.returncode == 2
    assert done.stdout.count("\n") == 1 and "not inside a git repository" in done.stdout


def test_without_a_committed_lock_is_a_one_line_error(template_copy):
    git(template_copy, "rm", "-q", "--cached", "--ignore-unmatch", "dvc.lock")
    git(template_copy, "commit", "-q", "--allow-empty", "-m", "no lock")
    done = _reprocheck(template_copy)
    assert done.returncode == 2, done.stdout
    assert done.stdout.count("\n") == 1 and "no dvc.lock committed" in done.stdout


@pytest.mark.e2e
def test_check_passes_on_a_committed_repro(repro_copy):
    git(repro_copy, "add", "-A")
    git(repro_copy, "commit", "-q", "--allow-empty", "-m", "lock")
    done = _reprocheck(repro_copy)
    assert done.returncode == 0, done.stdout
    assert "reproduced exactly" in done.stdout
    assert "Running stage 'step'" in done.stdout, "the check forces a full repro"


def _check_after_repro(repo, monkeypatch, capsys, *args) -> tuple[int, str]:
    """`spark repro-check ARGS` in-process on `repo`, whose workspace already holds what
    its forced repro writes (the same inputs give the same bytes and the same dvc.lock),
    so DVC's repro is left out; `dvc status` and the comparison run as they are. The
    forced repro itself is test_check_passes_on_a_committed_repro's."""
    from sparktrain.cli import main
    from sparktrain.repro import check

    real = check.dvc
    monkeypatch.setattr(check, "dvc", lambda *cmd, quiet=False:
                        0 if cmd[0] == "repro" else real(*cmd, quiet=quiet))
    monkeypatch.chdir(repo)
    capsys.readouterr()
    code = main(["repro-check", *args])
    return code, capsys.readouterr().out


@pytest.mark.e2e
def test_check_reports_drift_within_tolerance(repro_copy, monkeypatch, capsys):
    """A lock committed on 'another CPU': eval.json's loss off by 1e-7 relative."""
    eval_path = "out/train/job-dry-001/eval.json"
    metrics = json.loads((repro_copy / eval_path).read_text())
    metrics["loss"] *= 1 + 1e-7
    fake = json.dumps(metrics).encode()
    fake_md5 = "00" + "f" * 30
    blob = repro_copy / ".dvc" / "cache" / "files" / "md5" / fake_md5[:2] / fake_md5[2:]
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(fake)
    reproduced = (repro_copy / "dvc.lock").read_text()   # what this machine's repro writes
    lock = yaml.safe_load(reproduced)
    for out in lock["stages"]["eval"]["outs"]:
        if out["path"] == eval_path:
            out["md5"] = fake_md5
    (repro_copy / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    git(repro_copy, "add", "-A")
    git(repro_copy, "commit", "-q", "--allow-empty", "-m", "lock from another machine")
    (repro_copy / "dvc.lock").write_text(reproduced)

    code, done = _check_after_repro(repro_copy, monkeypatch, capsys, "--tolerance", "1e-4")
    assert code == 0, done
    assert f"drifted: {eval_path} (stage eval)" in done
    assert "drift within tolerance" in done

    code, strict = _check_after_repro(repro_copy, monkeypatch, capsys, "--tolerance", "1e-9")
    assert code == 1, strict
    assert f"drifted: {eval_path} (stage eval)" in strict
    assert "beyond tolerance" in strict and "repro-check: FAIL" in strict, strict


@pytest.mark.e2e
def test_a_lock_made_from_other_inputs_is_one_line(repro_copy, monkeypatch, capsys):
    """A change whose dvc.lock was not committed: the committed lock's outputs come from
    other params, so the check says that in one line, not a line per output that moved."""
    git(repro_copy, "add", "-A")
    git(repro_copy, "commit", "-q", "--allow-empty", "-m", "lock")
    lock = yaml.safe_load((repro_copy / "dvc.lock").read_text())
    lock["stages"]["step"]["params"]["params.yaml"]["step"]["lr"] = 0.05
    for out in lock["stages"]["step"]["outs"]:
        out["md5"] = "0" * 32            # what the other params' run wrote
    (repro_copy / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    code, said = _check_after_repro(repro_copy, monkeypatch, capsys)
    assert code == 1
    assert said.count("\n") == 1, said
    assert said.startswith("repro-check: FAIL: the dvc.lock committed at HEAD was made from "
                           "other inputs (stage step: params differs)"), said
    assert "commit the dvc.lock" in said


CKPT_LOCK = {"stages": {"step": {
    "cmd": "python -m stages.step", "deps": [],
    "outs": [{"path": "out/train/j/checkpoint.json", "hash": "md5", "md5": "c0"}]}}}
HASWELL = {"kernel": "Haswell", "numpy": "2.4.6", "blas": "openblas 0.3.31"}


def _made_with_check(old_made, new_made, old_in_cache=True):
    """A checkpoint whose loss moved 1e-7 relative: the verdict and the made-with lines."""
    from sparktrain.repro.check import made_with_lines

    new_lock = copy.deepcopy(CKPT_LOCK)
    new_lock["stages"]["step"]["outs"][0]["md5"] = "c1"
    old_ck = {"loss": 1.0, **({"made_with": old_made} if old_made else {})}
    new_ck = {"loss": 1.0 + 1e-7, "made_with": new_made}

    def read_old(out):
        return json.dumps(old_ck).encode() if old_in_cache else None

    def read_new(out):
        return json.dumps(new_ck).encode()

    verdict = compare_locks(CKPT_LOCK, new_lock, 1e-4, read_old, read_new)
    return verdict, made_with_lines(CKPT_LOCK, new_lock, read_old, read_new)


def test_a_kernel_change_is_drift_and_named_with_both_runs():
    verdict, [line] = _made_with_check(dict(HASWELL, kernel="SkylakeX"), HASWELL)
    assert verdict.within_tolerance and not verdict.exact, verdict.lines
    assert "this run kernel Haswell, numpy 2.4.6, BLAS openblas 0.3.31" in line
    assert "the lock's run kernel SkylakeX, numpy 2.4.6" in line
    assert line.endswith("the BLAS kernel differs"), line


def test_a_numpy_change_is_named_as_the_difference():
    _, [line] = _made_with_check(dict(HASWELL, numpy="2.3.0", blas="openblas 0.3.29"),
                                 HASWELL)
    assert line.endswith("numpy and the BLAS library differ"), line


def test_the_same_kernel_and_versions_say_the_drift_is_not_theirs():
    _, [line] = _made_with_check(HASWELL, HASWELL)
    assert "the same kernel and versions" in line


def test_an_old_checkpoint_without_the_record_or_cache_says_so():
    _, [line] = _made_with_check(None, HASWELL)
    assert "the lock's run not recorded" in line
    _, [line] = _made_with_check(HASWELL, HASWELL, old_in_cache=False)
    assert "not in the DVC cache" in line
