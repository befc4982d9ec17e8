"""The original project's documented command lines, adapted only in the program
name and paths (docs/compat.md), end to end on fresh temporary copies."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dvc.utils.hydra import apply_overrides
from safetensors.numpy import load_file

from sparkhelp import HANG_GUARD_S, ROOT, SPARK, assert_one_line_error, run_spark
from sparktrain.params import load_params
from sparktrain.train.recipes import load_recipe
from sparktrain.repro.toolenv import copy_project, tool_env

sys.path.insert(0, str(ROOT))
from tools import readme_pages as rp  # noqa: E402
from tools.proof import TABLE_BEGIN, TABLE_END  # noqa: E402

PROGRAM = "data/programs/train-step.sparkbc"   # theirs: docs/examples/spark-train-step.sparkbc
DATASET = "data/train/dataset.jsonl"           # theirs: examples/fixtures/train/dataset.jsonl
WEIGHTS = "out/train/sgd-proof/weights.safetensors"
APPLY = ["apply-step", "--sparkbc", PROGRAM, "--weights", WEIGHTS, "--dataset", DATASET]
VENV = ROOT / ".venv"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def summary(out: str) -> dict:
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return json.loads(lines[0])


def test_apply_step_creates_then_updates_in_place(project):
    rc, out, err = run_spark(APPLY + ["--checkpoint", "out/train/sgd-proof/checkpoint.json",
                                      "--outer", "4", "--inner", "8", "--step", "1"],
                             cwd=project)
    assert rc == 0, err
    first = summary(out)
    assert first["trained"] is True and first["not_sgd"] is False and first["step_n"] == 1
    assert first["loss_after"] < first["loss_before"]
    folder = project / "out/train/sgd-proof"
    ckpt = json.loads((folder / "checkpoint.json").read_text())
    assert ckpt["weights_sha256"] == sha(folder / "weights.safetensors")

    rc, out, err = run_spark(APPLY + ["--outer", "2", "--inner", "4", "--source", "notebook",
                                      "--command", "apply_step.py ..."], cwd=project)
    assert rc == 0, err
    second = summary(out)
    assert second["step_n"] == 2, "an existing file is the base: step_n defaults to its + 1"
    assert second["loss_before"] == pytest.approx(first["loss_after"], rel=1e-6)
    ckpt = json.loads((folder / "checkpoint.json").read_text())
    assert ckpt["base"] == WEIGHTS and ckpt["base_step_n"] == 1
    assert ckpt["source"] == "notebook" and ckpt["command"] == "apply_step.py ..."
    assert ckpt["weights_sha256"] == sha(folder / "weights.safetensors")
    art = (folder / "ARTIFACT").read_text()
    assert "trained=true" in art and "step_n=2" in art


def test_apply_step_is_spark_train_underneath(project, tmp_path):
    """Same tensors and losses as `spark train` of the program's TRAIN (their
    metadata differs only in the labels each front records: base, program), and
    two apply-step runs give the same bytes."""
    rc, _, err = run_spark(["train", "--program", PROGRAM, "--job", "job-dry-001"], cwd=project)
    assert rc == 0, err
    by_train = project / "out/train/job-dry-001"
    twins = []
    for copy in ("a", "b"):
        root = tmp_path / copy
        root.mkdir()
        for sub in ("data", "params.yaml"):
            subprocess.run(["cp", "-r", str(project / sub), str(root / sub)], check=True)
        rc, out, err = run_spark(["apply-step", "--sparkbc", PROGRAM, "--dataset", DATASET,
                                  "--weights", "out/train/job-dry-001/weights.safetensors"],
                                 cwd=root)
        assert rc == 0, err
        twins.append(root / "out/train/job-dry-001")
    assert sha(twins[0] / "weights.safetensors") == sha(twins[1] / "weights.safetensors")
    assert (twins[0] / "checkpoint.json").read_bytes() == (twins[1] / "checkpoint.json").read_bytes()
    a, b = load_file(by_train / "weights.safetensors"), load_file(twins[0] / "weights.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    ca = json.loads((by_train / "checkpoint.json").read_text())
    cb = json.loads((twins[0] / "checkpoint.json").read_text())
    assert ca["loss_curve"] == cb["loss_curve"]


@pytest.mark.parametrize("extra, needle", [
    (["--dim", "64"], "--dim 64 but"),
    (["--step", "1"], "must be greater than the base's step_n 1"),
    (["--checkpoint", "nowhere/checkpoint.json"], "folder nowhere does not exist"),
    (["--checkpoint", "out/train/sgd-proof/other.json"], "must be out/train/sgd-proof/checkpoint.json"),
])
def test_apply_step_bad_input_leaves_the_weights_untouched(project, extra, needle):
    rc, _, err = run_spark(APPLY, cwd=project)
    assert rc == 0, err
    before = sha(project / WEIGHTS)
    rc, out, err = run_spark(APPLY + extra, cwd=project)
    assert_one_line_error(rc, err, needle)
    assert out == "" and sha(project / WEIGHTS) == before


def test_apply_step_refuses_a_weights_file_that_is_not_safetensors(project):
    target = project / WEIGHTS
    target.parent.mkdir(parents=True)
    target.write_text("not weights")
    rc, out, err = run_spark(APPLY, cwd=project)
    assert_one_line_error(rc, err, "not a safetensors file")
    assert target.read_text() == "not weights"


def test_apply_step_exits_2_when_the_run_did_not_train(project):
    rc, _, err = run_spark(APPLY, cwd=project)
    before = sha(project / WEIGHTS)
    rc, out, err = run_spark(APPLY + ["--lr", "1e9"], cwd=project)
    assert rc == 2 and "training failed" in err and "Traceback" not in err
    assert summary(out)["trained"] is False
    assert sha(project / WEIGHTS) == before


# A short coder recipe (the schema of params.yaml): what `--params FILE` trains.
SHORT_CODER = """job: job-coder-tiny
program: data/programs/train-coder.sparkbc
scale: tiny
tokenizer: bpe
vocab_size: 300
corpus: {glob: "*.py", heldout: 0.1}
step: {outer: 2, inner: 4, lr: 0.01, batch_size: 8, optimizer: adamw, shards: 2}
"""


def test_spark_code_train_on_the_cpu(project):
    (project / "short.yaml").write_text(SHORT_CODER)
    rc, out, err = run_spark(["code", "train", "--params", "short.yaml", "--device", "auto"],
                             cwd=project)
    assert rc == 0, err
    assert err.count("device: cpu (auto") == 1  # `auto` says once what it picked
    first, report = out.split("\n", 1)
    assert json.loads(first)["trained"] is True
    # the Spark-coder job: a corpus, its tokenizer and streams prepared first
    assert json.loads(first)["job"] == "job-coder-tiny"
    folder = project / "out/train/job-coder-tiny"
    assert (folder / "corpus/train.bin").stat().st_size > 0
    # the recipe's tokenizer and shards, not params.yaml's (byte, 1)
    assert json.loads((folder / "checkpoint.json").read_text())["shards"] == 2
    assert json.loads((folder / "perf.json").read_text())["shards"] == 2
    assert json.loads((folder / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    # what was learned: the whole held-out stream's bpb beside the compressors, on the
    # bytes prepare measured them on, and the fixed prompts sampled and greedy
    files = json.loads((folder / "corpus/files.json").read_text())
    assert f"the whole held-out stream ({files['heldout_bytes']:,} bytes)" in report
    lines = report.splitlines()
    model_bpb = float(next(ln for ln in lines if ln.strip().startswith("model (tiny, bpe)"))
                      .split()[-1])
    assert 0 < model_bpb < 16
    base = files["heldout_baselines"]
    for name, key in (("zlib level 9", "zlib9_bpb"), ("lzma preset 9e", "lzma9e_bpb"),
                      (f"PPMd, order {base['ppmd_order']} ", "ppmd_bpb"),
                      ("lzma preset 9e, primed", "lzma9e_primed_bpb"),
                      (f"PPMd, order {base['ppmd_primed_order']}, primed", "ppmd_primed_bpb")):
        shown = next(ln for ln in lines if ln.strip().startswith(name)).split()[-1]
        assert shown == f"{base[key]:.4f}"
    shown = next(ln for ln in lines if "model / primed PPMd:" in ln)
    assert f"{model_bpb / base['ppmd_primed_bpb']:.4f}, sliding" in shown
    assert report.count("--- sampled (temperature 0.7, top-k 40, seed 0) ---") == 3
    assert report.count("--- greedy ---") == 3
    assert "--- prompt ---\nfor i in range(" in report
    # the 64-window figure is labelled as the estimate it is
    assert "64-window est." in err
    # the same recipe, again: the same weights and the same printed report
    rc2, out2, _ = run_spark(["code", "train", "--params", "short.yaml", "--device", "cpu"],
                             cwd=project)
    first2, report2 = out2.split("\n", 1)
    assert rc2 == 0 and report2 == report
    assert json.loads(first2)["weights_sha256"] == json.loads(first)["weights_sha256"]


def test_spark_code_train_mistakes(project):
    rc, out, err = run_spark(["code", "train", "--scale", "tiny", "--shards", "0"], cwd=project)
    assert_one_line_error(rc, err, "shards must be >= 1")
    rc, out, err = run_spark(["code", "train", "--scale", "tiny", "--device", "cuda"],
                             cwd=project)
    assert_one_line_error(rc, err, "--device cuda (or step.device: cuda):")  # no gpu extra, or no CUDA device
    assert not (project / "out/train/job-coder-tiny/failed.json").exists()
    rc, out, err = run_spark(["code", "train", "--scale", "huge"], cwd=project)
    assert_one_line_error(rc, err, "no coder recipe for scale 'huge'")
    rc, out, err = run_spark(["code", "train", "--params", "missing.yaml"], cwd=project)
    assert rc == 2 and "Traceback" not in err
    assert not (project / "out/train/job-coder-tiny").exists()


def test_every_scale_has_a_recipe():
    """The recipe table's rows are valid params files, one per built-in scale, each
    training that scale with a code tokenizer and an optimizer made for it."""
    from sparktrain.model.config import SCALES
    from sparktrain.train.recipes import load_recipe

    for scale in SCALES:
        p = load_recipe(scale, ROOT / "data/programs/coder-recipes.yaml")
        assert p.scale == scale and p.tokenizer == "bpe" and p.step.optimizer in ("adamw", "muon")
        assert p.step.schedule in ("cosine", "wsd") and p.step.outer * p.step.inner >= 500


@pytest.mark.e2e
def test_the_original_command_lines_in_a_fresh_copy(tmp_path):
    """`./spark --run-bc`, `./spark-code train`, and the make targets, each in a fresh
    copy of the project, with this checkout's virtualenv."""
    repo = copy_project(ROOT, tmp_path / "repo")
    env = tool_env(repo)
    bin_dir = VENV / "bin" if VENV.is_dir() else Path(sys.executable).parent

    def sh(*cmd: str, timeout: float = HANG_GUARD_S,
           env_extra: dict | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(list(cmd), cwd=repo, env={**env, **(env_extra or {})},
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stderr[-2000:]}"
        return done

    ran = sh(str(bin_dir / "spark"), "--run-bc", PROGRAM)
    assert [json.loads(line)["op"] for line in ran.stdout.splitlines()
            if line.startswith("{")][:2] == ["TRAIN", "STEP"]
    # the tiny row at a sixth of its budget, on the twenty top-level modules: the
    # console script's whole path; the row itself, against README, is the slow test below
    (repo / "tiny-short.yaml").write_text(yaml.safe_dump(_tiny_row(
        vocab_size=512, corpus={"glob": "*.py", "heldout": 0.1}, inner=100)))
    coded = sh(str(bin_dir / "spark-code"), "train", "--params", "tiny-short.yaml",
               "--device", "auto")
    assert json.loads(coded.stdout.splitlines()[0])["trained"] is True
    assert "held-out bits per byte, the whole held-out stream" in coded.stdout
    # -o: never remake the install stamp: a pip install -e from this temporary copy
    # would point the checkout's virtualenv at files deleted after the test
    make = ["make", f"VENV={VENV}", "-o", f"{VENV}/.installed-stamp"] if VENV.is_dir() else None
    # `spark run` and `dvc repro` write the same weights (tools/sparkbc_e2e.py, each in a
    # fresh copy): through make when there is a venv, else the tool itself with --root
    e2e = (sh(*make, "sparkbc-e2e") if make else
           sh(sys.executable, str(repo / "tools" / "sparkbc_e2e.py"), "--root", str(repo)))
    shas = re.findall(r"sha256 ([0-9a-f]{64})", e2e.stdout)
    assert len(shas) == 2 and shas[0] == shas[1], e2e.stdout
    assert "sparkbc-e2e: ok" in e2e.stdout
    if make is None:
        pytest.skip("no .venv: the make targets need the project's virtualenv")
    # the target runs pytest on tests/bc; `make test` runs every one of those tests
    # itself, so here one module of them shows the target's wiring, not the suite again
    bc = sh(*make, "test-sparkbc", env_extra={"PYTEST_ADDOPTS": "-k test_bc_reader"}).stdout
    assert "passed" in bc and "deselected" in bc and "failed" not in bc, bc
    assert "spark-sgd-proof: ok" in sh(*make, "spark-sgd-proof").stdout
    # the ten-minute scale proof is `make spark-sgd-proof-scale` (marked proof below)
    assert "tools/proof.py scale" in sh("make", "-n", "spark-sgd-proof-scale").stdout


def _tiny_row(inner=None, **changes) -> dict:
    """The recipe table's tiny row, with top-level keys (and step.inner) changed."""
    row = yaml.safe_load((ROOT / "data/programs/coder-recipes.yaml").read_text())["tiny"]
    row.update(changes)
    if inner is not None:
        row["step"]["inner"] = inner
    return row


@pytest.mark.proof   # 1.23M tokens, ~50 s: `pytest -m proof -k scale_tiny_prints`
def test_spark_code_train_scale_tiny_prints_what_readme_shows(tmp_path):
    """`spark-code train --scale tiny`, the whole row, in a fresh copy: the results log's
    copy of this run (docs/results/runs.md, written by tools/readme_figures.py --only
    coder-tiny) has the same losses and bits per byte, to the digit."""
    repo = copy_project(ROOT, tmp_path / "repo")
    bin_dir = VENV / "bin" if VENV.is_dir() else Path(sys.executable).parent
    coded = subprocess.run([str(bin_dir / "spark-code"), "train", "--scale", "tiny",
                            "--device", "auto"], cwd=repo, env=tool_env(repo),
                           capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert coded.returncode == 0, coded.stderr[-2000:]
    assert json.loads(coded.stdout.splitlines()[0])["trained"] is True
    assert "held-out bits per byte, the whole held-out stream" in coded.stdout
    shown = rp.coder_figures(rp.find_block("coder-tiny"))
    assert rp.coder_figures(coded.stdout) == shown and shown["bpb"], shown


@pytest.mark.proof
def test_the_scale_proof_target(tmp_path):
    repo = copy_project(ROOT, tmp_path / "repo")
    done = subprocess.run(["make", f"VENV={VENV}", "-o", f"{VENV}/.installed-stamp",
                           "spark-sgd-proof-scale"], cwd=repo,
                          env=tool_env(repo), capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0 and "spark-sgd-proof-scale: ok" in done.stdout, done.stderr
    # the results log's table (tools/readme_figures.py --only scale-proof): the same figures
    lines = done.stdout.splitlines()
    table = "\n".join(lines[lines.index(TABLE_BEGIN) + 1:lines.index(TABLE_END)])
    shown = rp.scale_figures(rp.find_block("scale-proof"))
    assert rp.scale_figures(table) == shown, (table, shown)


def test_spark_code_train_dvc_command_sets_the_whole_recipe(tmp_path):
    """`eval "$(spark code train --scale tiny --dvc-command)"` (README): every knob of the
    recipe as `-S ++key=value`, so params.yaml after DVC applies them is the recipe."""
    rc, out, err = run_spark(["code", "train", "--scale", "tiny", "--dvc-command"], cwd=ROOT)
    assert rc == 0, err
    words = shlex.split(out)
    assert words[:3] == ["dvc", "exp", "run"] and words[3::2] == ["-S"] * len(words[3::2])
    flags = words[4::2]
    assert all(f.startswith("++") for f in flags)
    params = tmp_path / "params.yaml"
    params.write_text((ROOT / "params.yaml").read_text())
    for _ in range(2):   # ++ again on what the first run set: DVC accepts it again
        apply_overrides(params, flags)
    got, want = load_params(params), load_recipe("tiny")
    for name in ("job", "program", "scale", "tokenizer", "vocab_size", "corpus"):
        assert getattr(got, name) == getattr(want, name), name
    # params.yaml's `step: 1` stays: without a base, the step_n the recipe's default gives
    assert got.step.step_n == 1 and want.step.step_n is None
    assert dataclasses.replace(got.step, step_n=None) == want.step


@pytest.mark.slow
def test_an_interrupted_code_train_says_how_to_continue_and_the_same_command_does(project):
    """Ctrl-C during `spark code train --checkpoint-every 1`: the old weights stay, one note
    says the same command continues the run, and it does. The second pass is long (seconds)
    so the signal lands inside it."""
    (project / "slow.yaml").write_text(
        SHORT_CODER.replace("outer: 2, inner: 4", "outer: 2, inner: 200"))
    argv = ["code", "train", "--params", "slow.yaml", "--device", "cpu",
            "--checkpoint-every", "1"]
    # SIGINT at its default even when this test runs in a background job (which ignores it)
    run = subprocess.Popen(SPARK + argv, cwd=project, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in run.stderr:   # one line per pass off a terminal
        seen.append(line)
        if "outer 1/2" in line:
            break
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=HANG_GUARD_S)
    assert run.returncode == 130, "".join(seen) + err
    assert "a resumable state of this run is saved" in err and "the same command" in err
    rc, out, err = run_spark(argv, cwd=project)
    assert rc == 0, err
    assert json.loads(out.split("\n", 1)[0])["trained"] is True
    assert "outer 2/2" in err and "outer 1/2" not in err, err      # continued, not redone
