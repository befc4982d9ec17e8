"""A corpus job through the stage scripts: tokens, the held-out split, bits per
byte, every optimizer, fail-loud rules, and a SIGKILLed run resumed to the
same final bytes."""
from __future__ import annotations

import json
import os
import re
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from dvc.utils.hydra import apply_overrides

from sparkhelp import HANG_GUARD_S, ROOT, assert_one_line_error, run_spark
from sparktrain.data.corpus import read_prepared
from sparktrain.data.tokenizer import load_tokenizer
from sparktrain.core.jobfiles import EVAL_DETAIL
from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES
from sparktrain.model.weights import save_weights

STEP = {"outer": 3, "inner": 4, "lr": 0.05, "batch_size": 4, "seed": 0, "clip": 1.0,
        "momentum": 0.9}


def coder_project(tmp_path: Path, **changes) -> Path:
    for sub in ("data", "stages"):
        shutil.copytree(ROOT / sub, tmp_path / sub)
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p.update(job="job-coder-tiny", program="data/programs/train-coder.sparkbc",
             step=dict(STEP), scale="tiny")
    p["corpus"] = dict(p["corpus"], glob="*.py")  # the twenty top-level modules, not more/
    for key, value in changes.items():
        if key == "step":
            p["step"].update(value)
        else:
            p[key] = value
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    return tmp_path


def stage(root, name, check=True):
    done = subprocess.run([sys.executable, "-m", f"stages.{name}"], cwd=root,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def pipeline(root, until="step"):
    for name in ("decode_bc", "tokenizer", "prepare", "step", "eval"):
        stage(root, name)
        if name == until:
            break
    return root / "out/train/job-coder-tiny"


def test_prepare_keeps_heldout_files_out_of_the_train_stream(tmp_path):
    folder = pipeline(coder_project(tmp_path), until="prepare")
    files = json.loads((folder / "corpus/files.json").read_text())
    held = [f["path"] for f in files["files"] if f["split"] == "heldout"]
    assert held and files["train_files"] >= 10
    assert files["dtype"] == "|u1" and (folder / "corpus/train.bin").stat().st_size == files["train_tokens"]
    data = read_prepared(folder / "corpus")
    tok = load_tokenizer(folder / "tokenizer.json")
    train_text = tok.decode(np.asarray(data.train))
    val_text = tok.decode(np.asarray(data.val))
    for rel in held:
        text = (tmp_path / "data/corpus/tiny" / rel).read_text()
        assert text in val_text and text[:2000] not in train_text
    assert files["heldout_bytes"] == sum(f["size"] for f in files["files"] if f["split"] == "heldout")
    assert 0 < files["heldout_baselines"]["zlib9_bpb"] < 8


def test_byte_job_learns_and_reports_bits_per_byte(tmp_path):
    folder = pipeline(coder_project(tmp_path), until="eval")
    ck = json.loads((folder / "checkpoint.json").read_text())
    assert ck["dataset_kind"] == "corpus" and ck["tokenizer"] == "byte"
    assert ck["loss_after"] < ck["loss_before"]
    curve = ck["loss_curve"]
    assert [c["outer"] for c in curve] == [0, 1, 2, 3]
    assert curve[-1]["heldout_bpb"] < curve[0]["heldout_bpb"]
    assert "optimizer" not in ck  # default knobs add no keys
    # eval scores the whole held-out stream itself (the step measures a fixed sample)
    ev = json.loads((folder / "eval.json").read_text())
    assert "heldout_bpb" not in ck and ev["zlib9_bpb"] > 0
    # bits per byte = nats / ln 2 / bytes: for byte tokens, nats per target is almost that
    assert ev["bpb"] == pytest.approx(ev["loss"] / np.log(2), rel=0.05)
    # windows every seq_len / 4 tokens: more context per target, no worse a score
    detail = json.loads((folder / EVAL_DETAIL).read_text())
    assert detail["sliding_stride"] == SCALES["tiny"].seq_len // 4
    assert ev["bpb_sliding"] <= ev["bpb"] + 0.01
    assert ev["bpb"] < curve[0]["heldout_bpb"]


@pytest.fixture(scope="module")
def bpe_job(tmp_path_factory):
    root = coder_project(tmp_path_factory.mktemp("bpe"), tokenizer="bpe", vocab_size=400,
                         step={"optimizer": "adamw", "lr": 0.01, "weight_decay": 0.01,
                               "schedule": "cosine", "warmup": 2, "min_lr": 0.001})
    return pipeline(root)


def test_bpe_adamw_cosine_job(bpe_job):
    folder = bpe_job
    ck = json.loads((folder / "checkpoint.json").read_text())
    assert ck["arch"]["vocab"] == 400 and ck["tokenizer"] == "bpe"
    assert (ck["optimizer"], ck["schedule"], ck["warmup"]) == ("adamw", "cosine", 2)
    assert ck["loss_curve"][-1]["heldout_bpb"] < ck["loss_curve"][0]["heldout_bpb"]
    files = json.loads((folder / "corpus/files.json").read_text())
    assert files["dtype"] == "<u2" and files["tokenizer_sha256"] == ck["tokenizer_sha256"]


def test_a_run_no_better_than_uniform_fails_loudly(tmp_path):
    root = coder_project(tmp_path, step={"outer": 1, "inner": 1, "lr": 1e-6})
    pipeline(root, until="prepare")
    done = stage(root, "step", check=False)
    assert done.returncode == 1, done.stderr
    assert "training failed" in done.stderr and "Traceback" not in done.stderr
    assert not (root / "out/train/job-coder-tiny/weights.safetensors").exists()


def test_the_pairs_jobs_knobs_on_a_corpus_are_refused_in_one_line(tmp_path):
    """`dvc exp run -S job=job-coder-tiny -S program=...` alone: params.yaml's byte /
    SGD 4 x 8 knobs, which lose to zlib; the tokenizer stage points at the recipe."""
    root = coder_project(tmp_path)
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["step"] = yaml.safe_load((ROOT / "params.yaml").read_text())["step"]
    (root / "params.yaml").write_text(yaml.safe_dump(p))
    stage(root, "decode_bc")
    done = stage(root, "tokenizer", check=False)
    assert_one_line_error(done.returncode, done.stderr, "job-coder-tiny trains a corpus",
                          "spark code train --scale tiny --dvc-command")
    assert not (root / "out/train/job-coder-tiny/tokenizer.json").exists()
    # the knobs it names are overrides DVC accepts on the project's params.yaml
    # (`-S step.optimizer=adamw` was "Key 'optimizer' is not in struct")
    flags = re.findall(r"-S (\S+)", done.stderr)
    assert flags and all(f.startswith("++") for f in flags), done.stderr
    copy = tmp_path / "params-copy.yaml"
    copy.write_text((ROOT / "params.yaml").read_text())
    apply_overrides(copy, flags)
    applied = yaml.safe_load(copy.read_text())
    assert (applied["tokenizer"], applied["step"]["optimizer"]) == ("bpe", "adamw")


@pytest.mark.parametrize("params,needle", [
    ({"tokenizer": "wordpiece"}, "tokenizer must be one of"),
    ({"tokenizer": "bpe", "vocab_size": 100}, "vocab_size must be >= 259"),
    ({"tokenizer": "bpe", "vocab_size": 65536}, "vocab_size must be <= 65535"),
    ({"step": {"optimizer": "adamw", "weight_decay": -0.1}}, "weight_decay must be >= 0"),
    ({"step": {"optimizer": "adamw", "beta2": 1.0}}, "beta2 must be < 1"),
    ({"corpus": {"glob": "**/*.rs"}}, "matches no file"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, params, needle):
    root = coder_project(tmp_path, **params)
    for name in ("decode_bc", "tokenizer", "prepare"):
        done = stage(root, name, check=False)
        if done.returncode:
            break
    assert_one_line_error(done.returncode, done.stderr, needle)
    assert not (root / "out/train/job-coder-tiny/corpus").exists()


def test_a_tokenizer_that_does_not_match_the_prepared_streams(tmp_path):
    root = coder_project(tmp_path)
    folder = pipeline(root, until="prepare")
    (folder / "tokenizer.json").write_text(load_tokenizer(folder / "tokenizer.json").to_json()
                                           .replace('"vocab": 256', '"vocab": 256 '))
    done = stage(root, "step", check=False)
    assert_one_line_error(done.returncode, done.stderr, "another tokenizer.json")


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_same_final_bytes(tmp_path):
    # passes long enough (about 0.3 s each here) that a kill in the first half
    # second after the first saved state lands mid-run, even on an idle machine
    step = {"outer": 6, "inner": 60, "batch_size": 8, "checkpoint_every": 1}
    whole = pipeline(coder_project(tmp_path / "a", step=step))
    root = coder_project(tmp_path / "b", step=step)
    folder = pipeline(root, until="prepare")
    proc = subprocess.Popen([sys.executable, "-m", "stages.step"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (folder / "resume.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(random.uniform(0, 0.5))  # a random moment after the first saved state
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (folder / "weights.safetensors").exists(), "killed too late; slow the run"
    stage(root, "step")
    for name in ("weights.safetensors", "checkpoint.json", "ARTIFACT"):
        assert (folder / name).read_bytes() == (whole / name).read_bytes(), name
    assert not (folder / "resume.json").exists()  # a finished run leaves no state behind


def test_generate_continues_text_with_the_tokenizer_the_weights_record(bpe_job, tmp_path):
    weights = bpe_job / "weights.safetensors"
    rc, out, err = run_spark(["generate", "--weights", weights, "--max-new", "8",
                              "def __init__(self"])
    assert rc == 0, err
    tok = load_tokenizer(bpe_job / "tokenizer.json")
    assert 0 < len(tok.encode(out.rstrip("\n"))) <= 8 + 2  # BPE tokens, not bytes
    same = tmp_path / "copy.json"
    same.write_bytes((bpe_job / "tokenizer.json").read_bytes())
    rc2, out2, err2 = run_spark(["generate", "--weights", weights, "--tokenizer", same,
                                 "--max-new", "8", "def __init__(self"])
    assert (rc2, out2) == (0, out), err2


def test_a_tokenizer_other_than_the_recorded_one_is_refused(bpe_job, tmp_path):
    weights = bpe_job / "weights.safetensors"
    other = tmp_path / "tokenizer.json"
    other.write_text((bpe_job / "tokenizer.json").read_text().replace('"<|eos|>"', '"<|end|>"'))
    rc, out, err = run_spark(["generate", "--weights", weights, "--tokenizer", other, "def f("])
    assert_one_line_error(rc, err, "not the tokenizer", "--tokenizer")
    assert out == ""
    target = tmp_path / "eval.json"
    rc, _, err = run_spark(["eval", "--weights", weights, "--tokenizer", other,
                            "--data", ROOT / "data/eval/tiny_heldout.jsonl", "-o", target])
    assert_one_line_error(rc, err, "not the tokenizer")
    assert not target.exists()
    lone = tmp_path / "lone"                   # weights without their tokenizer.json beside
    lone.mkdir()
    shutil.copy(weights, lone / "weights.safetensors")
    rc, _, err = run_spark(["generate", "--weights", lone / "weights.safetensors", "def f("])
    assert_one_line_error(rc, err, "tokenizer.json")


def test_spark_eval_scores_a_corpus_model_as_the_eval_stage_does(bpe_job, tmp_path):
    """Outside DVC: `spark eval --weights W` scores the held-out split prepared beside W
    (pairs rows are refused), with the eval stage's numbers."""
    rc, _, err = run_spark(["eval", "--weights", bpe_job / "weights.safetensors",
                            "--data", ROOT / "data/eval/tiny_heldout.jsonl"])
    assert_one_line_error(rc, err, "corpus model", "drop --data")
    rc, out, err = run_spark(["eval", "--weights", bpe_job / "weights.safetensors", "--json"])
    assert rc == 0, err
    mine = json.loads(out)
    stage(bpe_job.parents[2], "eval")
    staged = json.loads((bpe_job / "eval.json").read_text())
    assert {k: mine[k] for k in ("bpb", "zlib9_bpb", "lzma9e_bpb", "loss")} == \
        {k: staged[k] for k in ("bpb", "zlib9_bpb", "lzma9e_bpb", "loss")}


def test_a_byte_model_refuses_a_bpe_tokenizer(bpe_job, tmp_path):
    pairs = tmp_path / "pairs.safetensors"   # a byte-token model: no tokenizer recorded
    save_weights(pairs, build_model(SCALES["tiny"]).init_params(seed=0),
                 {"arch": SCALES["tiny"].to_dict()})
    rc, _, err = run_spark(["generate", "--weights", pairs, "--tokenizer",
                            bpe_job / "tokenizer.json", "hi"])
    assert_one_line_error(rc, err, "records no tokenizer")


def test_sharded_corpus_steps_give_the_same_bytes_with_one_or_two_workers(tmp_path):
    """The gradient engine of the pairs loop drives the corpus loop too: the bytes
    depend on step.shards, never on the worker count."""
    got = {}
    for workers in (1, 2):
        root = coder_project(tmp_path / f"w{workers}",
                             step={"outer": 2, "inner": 3, "shards": 2, "workers": workers})
        folder = pipeline(root)
        got[workers] = [(folder / n).read_bytes() for n in ("weights.safetensors", "ARTIFACT")]
        ck = json.loads((folder / "checkpoint.json").read_text())
        assert ck["shards"] == 2 and "workers" not in ck
        assert json.loads((folder / "perf.json").read_text())["workers"] == workers
    assert got[1] == got[2]
