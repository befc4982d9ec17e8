"""`spark train`, `spark run`, `spark status` as a user meets them: real processes."""
from __future__ import annotations

import fcntl
import json
import subprocess

import numpy as np
import pytest

from sparkhelp import ROOT, assert_one_line_error, run_spark
from sparktrain.bc.compiler import compile_source

FAST = ["--outer", "1", "--inner", "2"]


def _nothing_written(project, out="out"):
    folder = project / out
    return not folder.exists() or not any(p.is_file() for p in folder.rglob("*"))


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("rows, needle", [
    (None, "does not exist"),
    ("", "has no rows"),
    ('{"prompt": "a", "completion": "b"}\nnot json\n', ":2:"),
    ('{"prompt": "a"}\n', ":1:"),
])
def test_bad_dataset_is_one_line_exit_2_nothing_written(project, rows, needle):
    data = project / "data/train/bad.jsonl"
    if rows is not None:
        _write(data, rows)
    rc, out, err = run_spark(["train", "--dataset", data, "--out", "out/x"] + FAST, cwd=project)
    assert_one_line_error(rc, err, needle)
    assert _nothing_written(project)


def _base(project, mutate):
    from sparktrain.model.build import build_model
    from sparktrain.model.config import SCALES
    from sparktrain.model.weights import save_weights

    params = build_model(SCALES["tiny"]).init_params(0)
    meta = {"arch": SCALES["tiny"].to_dict(), "step_n": 1}
    mutate(params, meta)
    path = project / "out/base/weights.safetensors"
    save_weights(path, params, meta)
    return path


@pytest.mark.parametrize("mutate, needle", [
    (lambda p, m: p.pop("spark.layers.1.q.weight"), "lacks tensor spark.layers.1.q.weight"),
    (lambda p, m: p.__setitem__("spark.lm_head.weight", np.zeros((256, 8), np.float32)),
     "has shape (256, 8)"),
])
def test_bad_base_is_one_line_exit_2(project, mutate, needle):
    base = _base(project, mutate)
    rc, out, err = run_spark(["train", "--dataset", "data/train/dataset.jsonl", "--out", "out/y",
                              "--base", base] + FAST, cwd=project)
    assert_one_line_error(rc, err, needle)
    assert not (project / "out/y").exists()


def test_base_that_is_not_safetensors(project):
    base = _write(project / "out/base/junk.safetensors", "this is not a weights file")
    rc, out, err = run_spark(["train", "--dataset", "data/train/dataset.jsonl", "--out", "out/y",
                              "--base", base] + FAST, cwd=project)
    assert_one_line_error(rc, err, "not a safetensors file")


@pytest.mark.parametrize("flags, needle", [
    (["--dim", "30"], "not divisible by n_head"),
    (["--n-head", "4", "--n-kv-head", "3"], "not a multiple of n_kv_head"),
    (["--dim", "12", "--n-head", "4", "--n-kv-head", "2"], "odd"),
    (["--dim", "8192", "--n-layer", "64"], "above the limit"),
    (["--seq-len", "5000"], "seq_len 5000"),
    (["--lr", "-1"], "step.lr"),
])
def test_bad_architecture_or_knob(project, flags, needle):
    rc, out, err = run_spark(["train", "--dataset", "data/train/dataset.jsonl", "--out", "out/z"]
                             + FAST + flags, cwd=project)
    assert_one_line_error(rc, err, needle)
    assert _nothing_written(project)


def test_spark_run_executes_the_default_program(project):
    rc, out, err = run_spark(["run", "data/programs/train-step.sparkbc"], cwd=project)
    assert rc == 0, err
    lines = [json.loads(x) for x in out.strip().splitlines()]
    ops = [x.get("op") for x in lines]
    assert ops[:3] == ["TRAIN", "STEP", "TRAIN_STATUS"]
    train, step, status = lines[:3]
    assert train["trained"] is False and train["state"] == "declared"
    assert step["trained"] is True and step["loss_after"] < step["loss_before"]
    assert status["state"] == "trained" and status["weights_verified"] is True
    assert status["weights_sha256"] == step["weights_sha256"]
    # `print job` prints the TRAIN's binding, which follows the job: trained now
    assert lines[3]["op"] == "TRAIN" and lines[3]["job"] == "job-dry-001"
    assert (lines[3]["state"], lines[3]["trained"], lines[3]["not_sgd"]) == ("trained", True, False)
    assert "outer 4/4" in err  # progress on stderr
    rc2, out2, _ = run_spark(["--run-bc", "data/programs/train-step.sparkbc"], cwd=project)
    assert rc2 == 0 and json.loads(out2.splitlines()[1])["weights_sha256"] == step["weights_sha256"]
    rc3, out3, err3 = run_spark(["status", "job-dry-001"], cwd=project)
    assert rc3 == 0, err3
    st = json.loads(out3)
    assert st["state"] == "trained" and "perf" in st and st["perf"]["tokens_per_s"] > 0


def test_spark_run_refuses_an_opcode_it_does_not_execute(project):
    src = 'model code\nask "hello" -> answer\nprint answer\n'
    prog = project / "data/programs/ask.sparkbc"
    prog.write_bytes(compile_source(src))
    rc, out, err = run_spark(["run", prog], cwd=project)
    assert_one_line_error(rc, err, "ASK", "0x02")
    assert not (project / "out").exists()


@pytest.mark.parametrize("body, needle", [
    ('dataset "data/train/dataset.jsonl" base "fixture-base" out "../elsewhere/job" '
     'method "spark_distill_cpu"', "outside the project's out/"),
    ('dataset "data/train/missing.jsonl" base "fixture-base" out "out/train/j1" '
     'method "spark_distill_cpu"', "does not exist"),
    ('dataset "data/train/dataset.jsonl" base "fixture-base" out "out/train/j1" '
     'method "spark_distill_gpu"', "unsupported method"),
])
def test_spark_run_rejects_bad_train_before_touching_files(project, body, needle):
    prog = project / "p.sparkbc"
    prog.write_bytes(compile_source(f"model code\nmodel train {body} -> job\n"))
    rc, out, err = run_spark(["run", prog], cwd=project)
    assert_one_line_error(rc, err, needle)
    assert _nothing_written(project)


def test_step_of_an_undeclared_job(project):
    prog = project / "p.sparkbc"
    prog.write_bytes(compile_source('model step "nojob" -> s\n'))
    rc, out, err = run_spark(["run", prog], cwd=project)
    assert_one_line_error(rc, err, "nojob")


def test_status_of_unknown_job(project):
    rc, out, err = run_spark(["status", "never-ran"], cwd=project)
    assert_one_line_error(rc, err, "never-ran")
    rc, out, err = run_spark(["status", "../etc"], cwd=project)
    assert_one_line_error(rc, err)


def test_status_says_running_while_a_run_holds_the_job(tmp_path):
    """A step holds the job folder's .lock while it trains: `spark status` says running
    (it said declared, with the previous run's speed), then the state of the files."""
    out = tmp_path / "job"
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl",
                            "--out", out, "--outer", "1", "--inner", "2"])
    assert rc == 0, err
    with open(out / ".lock") as held:        # what lock_job holds in the training process
        fcntl.flock(held, fcntl.LOCK_EX)
        rc, stdout, err = run_spark(["status", out])
        assert rc == 0, err
        state = json.loads(stdout)
        assert (state["state"], state["last_state"]) == ("running", "trained")
        rc, stdout, _ = run_spark(["status", out, "--summary"])
        assert stdout.startswith("job job: running (a spark process is writing it now")
    rc, stdout, _ = run_spark(["status", out])
    assert json.loads(stdout)["state"] == "trained" and "last_state" not in stdout


def test_params_typo_is_named(project):
    text = (project / "params.yaml").read_text().replace("  outer: 4", "  oter: 4")
    (project / "params.yaml").write_text(text)
    rc, out, err = run_spark(["run", "data/programs/train-step.sparkbc"], cwd=project)
    assert_one_line_error(rc, err, "step.oter")
    assert _nothing_written(project)


def test_a_train_in_a_plain_git_checkout_leaves_the_checkout_alone(project):
    """Outside a DVC stage DVCLive writes only its files: before, its set-up ran `dvc init`
    in a git checkout without DVC and staged the new .dvc/ files in the user's index."""
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    rc, _, err = run_spark(["train", "--dataset", "data/train/dataset.jsonl",
                            "--out", "out/j"] + FAST, cwd=project)
    assert rc == 0, err
    assert (project / "out/j/dvclive/plots/metrics/loss.tsv").is_file()
    assert not (project / ".dvc").exists() and not (project / ".dvcignore").exists()
    staged = subprocess.run(["git", "-C", str(project), "diff", "--cached", "--name-only"],
                            capture_output=True, text=True, check=True).stdout
    assert staged == ""
