"""Round six: nothing lost when a disk fills or a run is cut, and records that match
their run (docs/outputs.md "The commit journal", "A write that fails").

1. A run that prepares its job's data (`spark train` of a corpus, `spark code train`)
   stages the new tokenizer.json and corpus/ and commits them with the weights: a
   failed run (a diverging rate, a full disk in prepare) leaves the job's old set
   whole, and `spark status` refuses a set whose tokenizer is not the weights'.
4. A kill inside the step's commit leaves the new weights with the new perf.json and
   dvclive/, or the old ones with the old: never the new weights with old curves.
3. A resume checks the held-out file's bytes, not only its name: an edited file
   starts the run afresh, so no record keeps the old file's losses.
5. A wsd cool-down too short to round to a micro-step still ends at min_lr.
6. A resume state whose AdamW step counter is not passes x inner, or whose second
   moments are negative, is discarded with one line naming why: the whole run's bytes.
7. eval.stride above seq_len is refused when the params are read, before a write.
11. A stage under `dvc repro` refuses a disk without room for its outputs and DVC's
    cache copies of them, before it writes (tests/pipeline/test_bad_input.py runs DVC).
9. A model card quotes no line separator (test_rel_card_forged.py); a printed path
   shows its escape codes as text; a legal 255-byte output name is written.
10. Ctrl-C of a run with a resume state leaves no .live-run (the resume rebuilds it);
    `spark sweep`'s workers end on Ctrl-C without a Python traceback each.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess

import pytest

import yaml

from relkit import (TRAIN, copy_project, killed_in_pass_two, snapshot, train_j,  # noqa: F401
                    trained)
from sparkhelp import ROOT, assert_one_line_error, run_spark
from sparktrain.core import fsutil
from sparktrain.core.jobfiles import STAGED
from sparktrain.model.weights import load_weights, weights_bytes
from sparktrain.core.errors import SparkError
from sparktrain.params import StepConfig, load_params
from sparktrain.train import jobstate, outputs
from sparktrain.train.folder import JobFolder
from sparktrain.train.optim import lr_at
from sparktrain.repro import dvclock

# params.yaml's knobs, named: without --params a folder trains with the tiny coder recipe
CORPUS = ["train", "--dataset", "data/corpus/tiny", "--out", "out/c", "--outer", "1",
          "--inner", "2", "--params", "params.yaml"]
KEPT = (".lock", "failed.json")  # what a failed run may add to a job


def _bpe_params(project):
    """params.yaml with a BPE tokenizer: a retrain that changes tokenizer.json and corpus/."""
    text = (project / "params.yaml").read_text()
    lines = ["tokenizer: bpe" if ln.startswith("tokenizer:") else
             "vocab_size: 300" if ln.startswith("vocab_size:") else ln
             for ln in text.splitlines()]
    (project / "bpe.yaml").write_text("\n".join(lines) + "\n")
    return ["--params", "bpe.yaml"]


@pytest.fixture
def corpus_job(project):
    rc, _, err = run_spark(CORPUS, cwd=project)
    assert rc == 0, err
    folder = project / "out/c"
    return project, folder, snapshot(folder)


def _same_set(folder, before):
    now = {k: v for k, v in snapshot(folder).items() if k not in KEPT}
    assert now == {k: v for k, v in before.items() if k not in KEPT}
    assert not (folder / STAGED).exists()
    state = jobstate.job_state(folder)
    assert state["weights_verified"], state


def test_a_failed_retrain_keeps_the_jobs_tokenizer_and_corpus(corpus_job):
    project, folder, before = corpus_job
    rc, _, err = run_spark(CORPUS + _bpe_params(project) + ["--lr", "1e6"], cwd=project)
    assert rc == 1 and "training diverged" in err, err
    _same_set(folder, before)


def _recipe(project, name, **step):
    """The tiny coder recipe, one pass of two micro-steps (a few seconds), with `step`."""
    recipe = yaml.safe_load((ROOT / "data/programs/coder-recipes.yaml").read_text())["tiny"]
    recipe["step"].update(outer=1, inner=2, warmup=0, shards=1, **step)
    (project / name).write_text(yaml.safe_dump(recipe))
    return recipe


def test_a_failed_code_train_keeps_the_jobs_tokenizer_and_corpus(project):
    """The issue's K4: over a trained coder job, another glob and a diverging rate."""
    _recipe(project, "fast.yaml")
    rc, _, err = run_spark(["code", "train", "--params", "fast.yaml"], cwd=project)
    assert rc == 0, err
    folder = project / "out/train/job-coder-tiny"
    before = snapshot(folder)
    bad = _recipe(project, "bad.yaml", lr=1e6, min_lr=0.0)
    bad["corpus"]["glob"] = "*.py"
    (project / "bad.yaml").write_text(yaml.safe_dump(bad))
    rc, _, err = run_spark(["code", "train", "--params", "bad.yaml"], cwd=project)
    assert rc in (1, 2) and "previous outputs kept" in err.splitlines()[-1], err
    _same_set(folder, before)


def test_a_full_disk_in_prepare_keeps_the_jobs_set(corpus_job, monkeypatch, capsys):
    from sparktrain.cli import main

    project, folder, before = corpus_job
    monkeypatch.chdir(project)
    real = fsutil.write_at

    def full(fd, name, data):  # the disk fills once the new corpus is written
        if name == "tokenizer.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, name, data)

    monkeypatch.setattr(fsutil, "write_at", full)
    assert main(CORPUS + _bpe_params(project)) == 2
    err = capsys.readouterr().err.strip().splitlines()  # progress lines, then one error
    assert [ln for ln in err if "error" in ln] == err[-1:] and "ENOSPC" in err[-1], err
    _same_set(folder, before)


def test_status_refuses_weights_beside_another_tokenizer(corpus_job):
    project, folder, _ = corpus_job
    tok = json.loads((folder / "tokenizer.json").read_text())
    (folder / "tokenizer.json").write_text(json.dumps(tok, indent=1))  # another file's bytes
    rc, out, err = run_spark(["status", "out/c"], cwd=project)
    state = json.loads(out)
    assert rc == 0 and state["state"] == "failed" and not state["weights_verified"], out
    assert "tokenizer.json is not the tokenizer the weights were trained with" in state["reason"]


def test_a_kill_inside_the_commit_never_pairs_new_weights_with_old_curves(corpus_job):
    project, folder, before = corpus_job
    rc, _, err = run_spark(CORPUS + ["--seed", "7"], cwd=project,
                           env={outputs.CRASH_HOOK: "mid-rename"})
    assert rc == -signal.SIGKILL, err
    state = jobstate.job_state(folder)  # read as the journal will leave it
    assert state["weights_sha256"] != json.loads(before["checkpoint.json"])["weights_sha256"]
    assert state["perf"] != json.loads(before["perf.json"])
    with JobFolder(folder) as job:  # the next writer rolls the journal forward
        job.recover()
    after = snapshot(folder)
    assert json.loads(after["checkpoint.json"])["seed"] == 7
    assert jobstate.job_state(folder)["weights_verified"]
    curve = "dvclive/plots/metrics/loss.tsv"
    assert after[curve] != before[curve] and after["perf.json"] != before["perf.json"]
    assert not [k for k in after if k.endswith((".pending", ".old"))] and ".commit" not in after


@pytest.mark.parametrize("cooldown", [0.01, 0.015, 1.0])
def test_a_wsd_cool_down_shorter_than_a_micro_step_still_reaches_min_lr(cooldown):
    step = StepConfig(outer=4, inner=8, lr=0.1, min_lr=0.001, schedule="wsd",
                      cooldown=cooldown)
    rates = [lr_at(step, t, 32) for t in range(32)]
    assert rates[-1] == pytest.approx(0.001) and rates[0] == (0.1 if cooldown < 1 else rates[0])
    assert all(a >= b for a, b in zip(rates, rates[1:]))


def test_eval_stride_above_seq_len_is_refused_before_code_train_writes(project):
    recipe = yaml.safe_load((ROOT / "data/programs/coder-recipes.yaml").read_text())["tiny"]
    recipe.setdefault("eval", {})["stride"] = 10 ** 6
    (project / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.raises(SparkError, match="eval.stride 1000000 is above seq_len"):
        load_params(project / "recipe.yaml")  # what every stage reads first
    rc, _, err = run_spark(["code", "train", "--params", "recipe.yaml"], cwd=project)
    assert_one_line_error(rc, err, "eval.stride")
    assert not (project / "out").exists()


# ---------------------------------------------------------------- 3, 6. what a resume takes

RESUMABLE = ["--outer", "3", "--inner", "2", "--checkpoint-every", "1", "--optimizer", "adamw",
             "--lr", "0.01", "--heldout", "data/eval/tiny_heldout.jsonl"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An unbroken resumable AdamW run: its job folder."""
    return train_j(copy_project(tmp_path_factory.mktemp("whole")), RESUMABLE) / "out/j"


def test_ctrl_c_with_a_resume_state_leaves_no_live_run(tmp_path, monkeypatch):
    job = killed_in_pass_two(copy_project(tmp_path / "p"), monkeypatch, RESUMABLE)
    assert not (job / ".live-run").exists()  # docs/pipeline.md: none is left


def _resume(root):
    rc, _, err = run_spark(TRAIN + ["--out", "out/j"] + RESUMABLE, cwd=root)
    assert rc == 0 and "Traceback" not in err, err
    return err


def _edit_state(job, change):
    tensors, meta = load_weights(job / "resume.safetensors")
    change(tensors)
    (job / "resume.safetensors").write_bytes(weights_bytes(tensors, meta))


def _negative_v(tensors):
    name = next(k for k in tensors if k.startswith("opt.v."))
    tensors[name] = tensors[name] - 1.0


BAD_STATES = {"t 0": lambda t: t.update({"opt.t": t["opt.t"] * 0}),
              "t + 1": lambda t: t.update({"opt.t": t["opt.t"] + 1}),
              "t 1e30": lambda t: t.update({"opt.t": t["opt.t"] * 0 + 1e30}),
              "t -2": lambda t: t.update({"opt.t": t["opt.t"] * 0 - 2}),
              "negative v": _negative_v}


@pytest.mark.parametrize("how", BAD_STATES)
def test_a_resume_state_with_wrong_counters_is_discarded(tmp_path, monkeypatch, whole, how):
    root = copy_project(tmp_path / "p")
    job = killed_in_pass_two(root, monkeypatch, RESUMABLE)
    _edit_state(job, BAD_STATES[how])
    err = _resume(root)
    said = [ln for ln in err.splitlines() if "saved state" in ln]
    assert len(said) == 1 and "discarding it and starting afresh" in said[0], err
    assert ("second moment" if how == "negative v" else "passes x inner = 2") in said[0]
    for name in ("weights.safetensors", "checkpoint.json"):
        assert (job / name).read_bytes() == (whole / name).read_bytes(), name


def test_an_edited_heldout_file_is_not_resumed(tmp_path, monkeypatch):
    root = copy_project(tmp_path / "p")
    job = killed_in_pass_two(root, monkeypatch, RESUMABLE)
    heldout = root / "data/eval/tiny_heldout.jsonl"
    heldout.write_text("".join(heldout.read_text().splitlines(keepends=True)[:-1]))
    err = _resume(root)
    assert "resumed after" not in err and "state of another run; starting afresh" in err, err
    other = copy_project(tmp_path / "q")  # an unbroken run on the edited file: the same bytes
    (other / "data/eval/tiny_heldout.jsonl").write_text(heldout.read_text())
    fresh = train_j(other, RESUMABLE) / "out/j"
    for name in ("weights.safetensors", "checkpoint.json"):
        assert (job / name).read_bytes() == (fresh / name).read_bytes(), name


# ---------------------------------------------------------------- 9. names and printed paths

ESC = "x\x1b]0;owned\x07\x1b[2Jy"  # a window title and a clear screen


@pytest.mark.parametrize("to", ["gguf", "hf"])
def test_an_export_path_prints_its_escape_codes_as_text(trained, to):
    root, weights = trained
    out = f"{ESC}-{to}"
    rc, stdout, err = run_spark(["export", "--to", to, out, "--weights",
                                 weights.relative_to(root)], cwd=root)
    assert rc == 0, err
    assert (root / out).exists()
    assert "\x1b" not in stdout + err and "\\x1b]0;owned" in stdout + err


@pytest.mark.parametrize("how", ["gguf", "hf", "compile"])
def test_a_255_byte_output_name_is_written(trained, how):
    root, weights = trained
    name = "\U0001F600" * 62 + how[0] * 7 if how != "gguf" else "n" * 250 + ".gguf"
    assert len(os.fsencode(name)) == 255
    argv = (["compile", "data/programs/train-step.spark", "-o", name] if how == "compile" else
            ["export", "--to", how, name, "--weights", weights.relative_to(root)])
    rc, _, err = run_spark(argv, cwd=root)
    assert rc == 0, err
    assert (root / name).exists() and not [p for p in os.listdir(root) if p.endswith(".tmp")]


# ---------------------------------------------------------------- 10. Ctrl-C on spark sweep

def _sigint_caught(pid: int) -> bool:
    """Whether process `pid` catches SIGINT (Python's KeyboardInterrupt handler)."""
    status = (open(f"/proc/{pid}/status").read()).splitlines()
    caught = next(ln for ln in status if ln.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc/PID/status")
def test_sweep_workers_take_ctrl_c_without_a_traceback():
    pytest.importorskip("distributed")
    from sparktrain.sweep.driver import cluster_client

    with cluster_client(None, 1, None) as client:
        pids = list(client.run(os.getpid).values())
        assert pids and not any(_sigint_caught(pid) for pid in pids)
    assert _sigint_caught(os.getpid())  # this process keeps Python's handler


# ------------------------------------------- 11. room for a stage's outputs under DVC

PAGE = 4096


@pytest.fixture
def tmpfs(tmp_path):
    """A tmpfs at tmp_path/disk (skipped where mount is not allowed) and `left(n)`:
    shrink it to n bytes free."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("mount -t tmpfs is not allowed here")

    def left(n):
        st = os.statvfs(disk)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        subprocess.run(["mount", "-o", f"remount,size={used + n}", str(disk)], check=True)
        assert os.statvfs(disk).f_bavail * st.f_frsize == n
    yield disk, left
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_stage_refuses_a_disk_without_room_for_dvcs_copies(tmpfs, monkeypatch):
    disk, left = tmpfs
    job, cache = disk / "job", disk / "cache"
    job.mkdir()
    monkeypatch.setattr(dvclock, "cache_dir", lambda: cache)
    files = {job / "eval.json": b"x" * (2 * PAGE + 1)}   # three pages, and three in the cache
    monkeypatch.delenv("DVC_STAGE", raising=False)
    left(PAGE)  # (a size of 0 would mean no limit at all)
    dvclock.check_room(files)                  # run by hand: its write says what failed
    monkeypatch.setenv("DVC_STAGE", "eval")
    left(6 * PAGE + dvclock.DVC_SLACK)
    dvclock.check_room(files)                  # exactly enough
    left(6 * PAGE + dvclock.DVC_SLACK - PAGE)
    with pytest.raises(SparkError, match=r"not enough space on the disk of .*job: "
                                         r"\d+ KiB free, 280 KiB needed"):
        dvclock.check_room(files)
    data = files[job / "eval.json"]
    md5 = hashlib.md5(data).hexdigest()
    (cache / "files/md5" / md5[:2]).mkdir(parents=True)
    (cache / "files/md5" / md5[:2] / md5[2:]).write_bytes(data)
    left(3 * PAGE + dvclock.DVC_SLACK)
    dvclock.check_room(files)                  # already in the cache: no second copy
