"""Round three: the surfaces built last (sweep, export/import, DVC restore, apply-step,
status, generate) under hostile input. One test (or more) per defect class of issue 18;
each asserts the outcome a careless user or an attacker would otherwise get."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import types

import pytest
from safetensors.numpy import save

from relkit import FAST, TRAIN, snapshot, trained  # noqa: F401  (fixture)
from sparkhelp import PROMPT_GUARD_S, ROOT, assert_one_line_error, run_spark
from sparktrain.core.errors import SparkError, printable
from sparktrain.repro import dvclock
from sparktrain.sweep.grid import MAX_POINTS, expand, parse_axis

PROGRAM = "data/programs/train-step.sparkbc"


# ------------------------------------------------------------ 1. sweep as documented

def _documented_sweeps() -> list[list[str]]:
    """Every `spark sweep ...` line of the code blocks of README and of the walk-through
    it links (docs/experiments.md), split as a shell would."""
    found = []
    text = (ROOT / "README.md").read_text() + (ROOT / "docs/experiments.md").read_text()
    for line in text.splitlines():
        line = line.split("#")[0].strip().removeprefix("$ ")
        if line.startswith("spark sweep"):
            found.append(shlex.split(line)[1:])
    return found


def test_the_readme_shows_sweeps_with_and_without_workers():
    lines = _documented_sweeps()
    assert any("--workers" in a for a in lines) and any("--scheduler" in a for a in lines)


@pytest.mark.parametrize("argv", _documented_sweeps() + [["sweep", "-S", "step.lr=0.05,0.2"]],
                         ids=" ".join)
def test_documented_sweep_lines_reach_the_cluster(argv, monkeypatch, tmp_path):
    """The command lines as written, through the real parser and cmd_sweep; only the
    cluster and git are stood in for. The default (no --workers) used to die on a
    missing `usable_cores`."""
    from sparktrain.cli import main
    from sparktrain.runtime import usable_cores
    from sparktrain.sweep import driver

    seen = {}
    monkeypatch.setattr(driver, "plan_sweep", lambda repo, specs, *a, **k: seen.setdefault(
        "specs", types.SimpleNamespace(points=())))
    monkeypatch.setattr(driver, "sweep", lambda plan, scheduler, workers, scratch, progress,
                        **k: seen.update(scheduler=scheduler, workers=workers) or
                        {"baseline": "0" * 40, "axes": [], "points": []})
    monkeypatch.setattr("sparktrain.sweep.grid.sweep_table", lambda doc: "table")
    (tmp_path / ".dvc").mkdir()          # a project root for the sweep to find
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    if "--scheduler" in argv:
        assert seen["scheduler"] == argv[argv.index("--scheduler") + 1]
    elif "--workers" in argv:
        assert seen["workers"] == int(argv[argv.index("--workers") + 1])
    else:
        assert seen["workers"] == usable_cores() >= 1


# ------------------------------------------------------------ 2. apply-step lost update

def _apply_step(project, weights, *extra):
    return run_spark(["apply-step", "--sparkbc", PROGRAM, "--weights", weights, "--dataset",
                      "data/train/dataset.jsonl", *FAST, *extra], cwd=project)


def test_apply_step_holds_the_job_lock_before_it_reads_the_base(trained, monkeypatch):
    from sparktrain.cli import main
    from sparktrain.cli import original
    from sparktrain.train import outputs

    project, weights = trained
    folder = project / "out/lock-order"
    shutil.copytree(weights.parent, folder)
    held = []
    real = original._arch_from_base
    monkeypatch.setattr(original, "_arch_from_base",
                        lambda args, w: held.append(outputs.held_elsewhere(folder))
                        or real(args, w))
    monkeypatch.chdir(project)
    main(["apply-step", "--sparkbc", PROGRAM, "--weights", str(folder / "weights.safetensors"),
          "--dataset", "data/train/dataset.jsonl", *FAST])
    assert held == [True]                       # its JobFolder held the lock
    assert not outputs.held_elsewhere(folder)   # and released it once the run was done


def test_a_second_in_place_writer_refuses_and_changes_nothing(trained):
    project, weights = trained
    folder = project / "out/busy"
    shutil.copytree(weights.parent, folder)
    before = snapshot(folder)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
         "os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
         "time.sleep(60)", str(folder / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rc, _, err = _apply_step(project, folder / "weights.safetensors")
    finally:
        holder.kill()
        holder.wait()
    assert_one_line_error(rc, err, "in use by another spark process")
    assert snapshot(folder) == before


def test_two_apply_steps_in_a_row_both_count(trained):
    project, weights = trained
    folder = project / "out/twice"
    shutil.copytree(weights.parent, folder)
    steps = []
    for _ in range(2):
        rc, out, err = _apply_step(project, folder / "weights.safetensors")
        assert rc == 0, err
        steps.append(json.loads(out)["step_n"])
    assert steps[1] == steps[0] + 1


# ------------------------------------------------------------ 3. export onto a job

@pytest.mark.parametrize("target, needle", [
    ("out/j", "which this command reads"),    # the job's own folder (holds the input)
    ("out", "which this command reads"),      # contains the job (and its weights)
    ("out/j/hf", "inside the job folder"),    # inside the job
    (".", "project folder"),                  # the project itself (a dvc.yaml there)
    ("data", "not an exported Hugging Face folder"),  # a folder of another layout
])
def test_export_force_never_destroys_a_job_or_the_project(trained, target, needle):
    project, weights = trained
    (project / "dvc.yaml").write_text("stages: {}\n")
    before = snapshot(project)
    try:
        rc, _, err = run_spark(["export", "--to", "hf", target, "--weights", weights, "--force"],
                               cwd=project)
    finally:
        (project / "dvc.yaml").unlink()
    assert_one_line_error(rc, err, needle)
    after = snapshot(project)
    after.pop("dvc.yaml", None)
    before.pop("dvc.yaml", None)
    assert after == before


def test_export_into_the_package_source_tree_is_refused(trained, tmp_path):
    _, weights = trained
    rc, _, err = run_spark(["export", "--to", "hf", ROOT / "sparktrain" / "x", "--weights",
                            weights, "--force"], cwd=tmp_path)
    assert_one_line_error(rc, err, "sparktrain/ folder")
    assert not (ROOT / "sparktrain" / "x").exists()


# ------------------------------------------------------------ 4. DVC restore confinement

def _lock_with(tmp_path, outs):
    cache = tmp_path / ".dvc/cache"
    entries = []
    for path, data in outs:
        md5 = hashlib.md5(data).hexdigest()
        blob = cache / "files" / "md5" / md5[:2] / md5[2:]
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        entries.append({"path": path, "hash": "md5", "md5": md5, "size": len(data)})
    (tmp_path / "dvc.lock").write_text(json.dumps(
        {"schema": "2.0", "stages": {"step": {"cmd": "x", "outs": entries}}}))
    return cache


def test_restore_writes_only_inside_the_job_folder(tmp_path, monkeypatch):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    cache = _lock_with(tmp_path, [
        ("out/train/j/weights.safetensors", b"good"),
        (str(outside / "evil"), b"abs"),
        ("out/train/j/../../../../evil", b"dotdot"),
        ("out/train/other/ARTIFACT", b"not this job"),
    ])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(dvclock, "cache_dir", lambda: cache)
    note = dvclock.restore_outputs("step", "out/train/j")
    assert (tmp_path / "out/train/j/weights.safetensors").read_bytes() == b"good"
    assert not outside.exists() and not (tmp_path.parent / "evil").exists()
    assert not (tmp_path / "out/train/other").exists()
    assert "not restored" in note and "evil" in note
    assert "out/train/other" not in note        # another job's outputs: not this job's business


def test_a_lock_of_another_job_restores_nothing_and_says_nothing_alarming(tmp_path,
                                                                          monkeypatch):
    """An interrupted run of job-mine whose dvc.lock still records job-dry-001's step."""
    cache = _lock_with(tmp_path, [("out/train/job-dry-001/ARTIFACT", b"theirs"),
                                  ("out/train/job-dry-001/weights.safetensors", b"w")])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(dvclock, "cache_dir", lambda: cache)
    note = dvclock.restore_outputs("step", "out/train/job-mine")
    assert note == "no earlier outputs recorded in dvc.lock for this job (it records another job's)"
    assert dvclock.restored_note("step", lambda: Path("out/train/job-mine")) == ""
    assert not (tmp_path / "out/train").exists()


def test_restore_checks_md5_and_shrugs_off_a_malformed_lock(tmp_path, monkeypatch):
    cache = _lock_with(tmp_path, [("out/train/j/ARTIFACT", b"recorded")])
    blob = next(p for p in cache.rglob("*") if p.is_file())
    blob.write_bytes(b"tampered")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(dvclock, "cache_dir", lambda: cache)
    assert "not all in the DVC cache" in dvclock.restore_outputs("step", "out/train/j")
    assert not (tmp_path / "out/train/j/ARTIFACT").exists()
    for text in ("stages: [1, 2]\n", "stages: {step: {outs: 3}}\n", "stages: {step: {outs: "
                 "[{path: 5, md5: ../../etc}]}}\n", "a: &x [1]\nb: *x\n", "[" * 5000):
        (tmp_path / "dvc.lock").write_text(text)
        assert dvclock.restore_outputs("step", "out/train/j") == \
            "no earlier outputs recorded in dvc.lock"


# ------------------------------------------------------------ 5. HF shards confined

@pytest.fixture
def hf_folder(trained, tmp_path):
    _, weights = trained
    out = tmp_path / "hf"
    rc, _, err = run_spark(["export", "--to", "hf", out, "--weights", weights])
    assert rc == 0, err
    return out


@pytest.mark.parametrize("weight_map, needle", [
    ("../secret.safetensors", "not a file name in the model folder"),
    ("/etc/passwd", "not a file name in the model folder"),
    ("sub/model.safetensors", "not a file name in the model folder"),
    ("link.safetensors", "link out of the model folder"),
])
def test_import_reads_shards_only_inside_the_folder(hf_folder, tmp_path, weight_map, needle):
    secret = tmp_path / "secret.safetensors"
    shutil.copy(hf_folder / "model.safetensors", secret)
    (hf_folder / "model.safetensors").unlink()
    (hf_folder / "link.safetensors").symlink_to(secret)
    (hf_folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed_tokens.weight": weight_map}}))
    rc, _, err = run_spark(["import", "--from", "hf", hf_folder, "--out", tmp_path / "w.st"])
    assert_one_line_error(rc, err, needle)
    assert not (tmp_path / "w.st").exists()


# ------------------------------------------------------------ 9. YAML alias bombs, size

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi")) + "step:\n  outer: *i\n"


@pytest.mark.parametrize("text, needle", [
    (BOMB, "alias"),
    ("step: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper"),
    ("job: j\n" + "# pad\n" * 200_000, "1,048,576-byte limit"),
])
def test_params_bombs_are_one_line_in_a_second(trained, text, needle):
    project, _ = trained
    (project / "p.yaml").write_text(text)
    t0 = time.monotonic()
    rc, _, err = run_spark(TRAIN + ["--out", "out/bomb", "--params", "p.yaml"] + FAST,
                           cwd=project, timeout=PROMPT_GUARD_S)
    assert time.monotonic() - t0 < 20
    assert_one_line_error(rc, err, needle)


# ------------------------------------------------------------ 11. sweep grid size

def test_a_million_point_grid_is_refused_before_expanding():
    axes = [parse_axis("step.lr=" + ",".join(f"0.{i:04d}" for i in range(1, 1001))),
            parse_axis("step.seed=" + ",".join(str(i) for i in range(1000)))]
    t0 = time.monotonic()
    with pytest.raises(SparkError, match=f"1,000,000 points, above the limit of {MAX_POINTS:,}"):
        expand(axes, {"step": {"lr": 0.1, "seed": 0}})
    assert time.monotonic() - t0 < 1


# ------------------------------------------------------------ 12. status on a huge file

def test_status_does_not_hash_a_file_above_the_weights_cap(trained):
    project, weights = trained
    folder = project / "out/sparse"
    shutil.copytree(weights.parent, folder)
    with open(folder / "weights.safetensors", "r+b") as f:
        f.truncate(64 << 30)  # sparse: 64 GiB claimed, nothing on disk
    t0 = time.monotonic()
    try:
        rc, out, err = run_spark(["status", folder], cwd=project, timeout=PROMPT_GUARD_S)
    finally:
        shutil.rmtree(folder)  # the module's other tests snapshot the project
    assert rc == 0, err
    assert time.monotonic() - t0 < 20
    state = json.loads(out)
    assert state["state"] == "failed" and state["weights_verified"] is False


# ------------------------------------------------------------ 13. crafted inputs

def _edit_config(folder: Path, **changes):
    conf = json.loads((folder / "config.json").read_text())
    conf.update(changes)
    (folder / "config.json").write_text(json.dumps(conf))


@pytest.mark.parametrize("changes, needle", [
    ({"rope_parameters": "default"}, "rope_parameters must be an object"),
    ({"rope_scaling": "linear", "rope_parameters": None}, "rope_scaling must be an object"),
    ({"architectures": 5}, "architectures must be a list"),
    ({"rms_norm_eps": float("nan")}, "NaN is not a JSON number"),
    ({"rms_norm_eps": float("inf")}, "Infinity is not a JSON number"),
    ({"num_hidden_layers": 10 ** 9}, "n_layer 1000000000 is above the limit"),
    ({"num_hidden_layers": 2.5}, "must be integers"),
    ({"hidden_size": "32"}, "must be integers"),
])
def test_crafted_hf_configs_are_one_line(hf_folder, tmp_path, changes, needle):
    _edit_config(hf_folder, **changes)
    rc, _, err = run_spark(["import", "--from", "hf", hf_folder, "--out", tmp_path / "w.st"])
    assert_one_line_error(rc, err, needle)


@pytest.mark.parametrize("name, text, needle", [
    ("config.json", "[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ("config.json", '{"vocab_size": 1' + "0" * 5000 + "}", "not JSON"),
    ("model.safetensors.index.json", '{"weight_map": [1, 2]}', "weight_map must be an object"),
    ("model.safetensors.index.json", '{"weight_map": 7}', "weight_map must be an object"),
    ("model.safetensors.index.json", "[" * 200_000, "index.json"),
])
def test_crafted_hf_json_is_one_line(hf_folder, tmp_path, name, text, needle):
    if name.startswith("model.safetensors.index"):
        (hf_folder / "model.safetensors").unlink()
    (hf_folder / name).write_text(text)
    rc, _, err = run_spark(["import", "--from", "hf", hf_folder, "--out", tmp_path / "w.st"])
    assert_one_line_error(rc, err, needle)


def _bf16_weights(path: Path):
    """A Spark weights file whose embed tensor is declared BF16 (raw bytes)."""
    data = save({"spark.embed.weight": np.zeros((2, 2), np.float16)},
                metadata={"spark": json.dumps({"arch": {}})})
    n = int.from_bytes(data[:8], "little")
    header = data[8:8 + n].replace(b'"F16"', b'"BF16"')
    path.write_bytes(data[:8] + header + data[8 + n:])


@pytest.mark.parametrize("dtype", ["BF16", "F8_E4M3", "Q4"])
def test_unknown_and_unsupported_dtypes_are_one_line(trained, tmp_path, dtype):
    project, _ = trained
    path = tmp_path / "weights.safetensors"
    _bf16_weights(path)
    path.write_bytes(path.read_bytes().replace(b'"BF16"', f'"{dtype}"'.encode().ljust(6)))
    for argv in (["eval", "--weights", path, "--data", "data/eval/tiny_heldout.jsonl"],
                 ["generate", "--weights", path, "hi"],
                 ["export", "--to", "gguf", tmp_path / "x.gguf", "--weights", path]):
        rc, _, err = run_spark(argv, cwd=project)
        assert_one_line_error(rc, err)


@pytest.mark.parametrize("text", ["[" * 200_000 + "]" * 200_000, '{"model": ' * 50_000])
def test_deep_tokenizer_json_is_one_line(trained, tmp_path, text):
    project, weights = trained
    tok = tmp_path / "tokenizer.json"
    tok.write_text(text)
    rc, _, err = run_spark(["export", "--to", "hf", tmp_path / "hf", "--weights", weights,
                            "--tokenizer", tok], cwd=project)
    assert_one_line_error(rc, err)


@pytest.mark.parametrize("argv", [
    TRAIN + ["--out", "out/" + "x" * 300] + FAST,                   # ENAMETOOLONG
    TRAIN + ["--out", "params.yaml/sub"] + FAST,                    # parent is a file
    ["export", "--to", "gguf", "params.yaml/x.gguf", "--weights", "W"],
    ["export", "--to", "gguf", "out/" + "y" * 300 + ".gguf", "--weights", "W"],
    ["import", "--from", "hf", "out/hf-missing", "--out", "params.yaml/w"],
])
def test_unwritable_out_paths_are_one_line(trained, argv):
    project, weights = trained
    before = snapshot(project)
    rc, _, err = run_spark([str(weights) if a == "W" else a for a in argv], cwd=project)
    assert_one_line_error(rc, err)
    assert snapshot(project) == before


@pytest.mark.parametrize("env, needle", [
    ({"SPARK_WORKERS": "two"}, "SPARK_WORKERS"),
    ({"SPARK_BLAS_THREADS": "lots"}, "SPARK_BLAS_THREADS"),
    ({"SPARK_BLAS_THREADS": "-3"}, "SPARK_BLAS_THREADS"),
    ({"SPARK_MAX_DATASET_MB": "nan"}, "SPARK_MAX_DATASET_MB"),
])
def test_environment_values_that_are_not_numbers_are_one_line(trained, env, needle):
    project, _ = trained
    rc, _, err = run_spark(TRAIN + ["--out", "out/env", "--shards", "2"] + FAST, cwd=project,
                           env=env)
    assert_one_line_error(rc, err, needle)


@pytest.mark.parametrize("pattern", ["**/***/***/*", "a/**b/*"])
def test_malformed_corpus_globs_are_one_line(tmp_path, pattern):
    from sparktrain.data.corpus import read_corpus

    (tmp_path / "a.py").write_text("x = 1\n")
    with pytest.raises(SparkError, match="corpus glob"):
        read_corpus(str(tmp_path), [pattern], 0.5)


def test_a_corpus_above_its_cap_is_refused_from_stat(tmp_path, monkeypatch):
    from sparktrain.data.corpus import read_corpus

    for i in range(3):
        with open(tmp_path / f"f{i}.py", "wb") as f:
            f.truncate(1 << 20)  # sparse: nothing read before the refusal
    monkeypatch.setenv("SPARK_MAX_CORPUS_MB", "2")
    with pytest.raises(SparkError, match="3,145,728 bytes in 3 files, above"):
        read_corpus(str(tmp_path), ["*.py"], 0.5)


@pytest.mark.parametrize("shards, needle", [(10 ** 12, "shards must be in")])
def test_absurd_shard_counts_are_refused(trained, shards, needle):
    project, _ = trained
    rc, _, err = run_spark(TRAIN + ["--out", "out/sh", "--shards", str(shards)] + FAST,
                           cwd=project)
    assert_one_line_error(rc, err, needle)


# ------------------------------------------------------------ 14. terminal safety

ESC = "\x1b]0;pwned\x07\x1b[2J"


def test_the_helper_escapes_controls_and_bidi():
    shown = printable(ESC + "\u202eabc\x9b31m", keep="\n")
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e]", shown)
    assert printable("line\n", keep="\n") == "line\n"


def test_eval_family_table_and_status_summary_escape(trained, tmp_path):
    project, weights = trained
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "hi", "completion": "there",
                                "family": "fam" + ESC}) + "\n")
    rc, out, err = run_spark(["eval", "--weights", weights, "--data", data], cwd=project)
    assert rc == 0, err
    assert "fam\\x1b" in out and "\x1b" not in out
    folder = project / ("out/job" + ESC)
    shutil.copytree(weights.parent, folder)
    rc, out, err = run_spark(["status", folder, "--summary"], cwd=project)
    assert rc == 0, err
    assert "\x1b" not in out and "\x07" not in out


def test_stage_errors_are_escaped(monkeypatch, capsys):
    from stages.common import run

    def stage():
        raise SparkError(f"corpus file {ESC}.py is not UTF-8")
    assert run("prepare", stage) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b" in err


def test_sweep_and_compare_tables_escape(monkeypatch):
    from sparktrain.sweep.grid import sweep_table
    from sparktrain.core.errors import printable_lines

    doc = {"baseline": "0" * 40, "axes": [["step.lr", ["0.1" + ESC]]],
           "points": [{"name": "sweep-0", "state": "failed", "params": {"step.lr": "0.1" + ESC},
                       "metrics": {}, "outputs": {}, "error": ESC}]}
    try:
        table = sweep_table(doc)
    except (KeyError, TypeError):
        pytest.skip("comparison document layout differs")
    assert "\x1b" not in printable_lines(table)


# ------------------------------------------------------------ 15. temperature near zero

@pytest.mark.parametrize("temperature", ["1e-300", "5e-324", "1e-7"])
def test_tiny_temperatures_are_greedy_and_never_emit_nul(trained, temperature):
    project, weights = trained
    rc, greedy, err = run_spark(["generate", "--weights", weights, "--raw", "hi"],
                                cwd=project)
    assert rc == 0, err
    rc, out, err = run_spark(["generate", "--weights", weights, "--raw", "--temperature",
                              temperature, "hi"], cwd=project)
    assert rc == 0, err
    assert out == greedy and "\x00" not in out


def test_pick_next_never_draws_from_a_non_finite_distribution():
    from sparktrain.model.sampling import pick_next

    logits = np.array([[1e300, -1e300, 0.0], [np.finfo(np.float64).max, 1.0, 2.0]])
    for t in (1e-300, 1e-3, 1.0, 1e300):
        got = pick_next(logits, t, 0, np.random.default_rng(0))
        assert ((0 <= got) & (got < 3)).all()
    assert (pick_next(logits, 1e-300, 0, np.random.default_rng(0)) == [0, 0]).all()


# ------------------------------------------------------------ 8. Ctrl-C and SIGTERM in a stage

def _stage_project(tmp_path, monkeypatch):
    """A cwd with params.yaml, and a dvc.lock + cache recording the step's weights."""
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    from stages.common import params

    monkeypatch.chdir(tmp_path)
    job = params().job
    weights = f"out/train/{job}/weights.safetensors"
    cache = _lock_with(tmp_path, [(weights, b"the previous weights")])
    monkeypatch.setattr(dvclock, "cache_dir", lambda: cache)
    return tmp_path / weights


def test_sigint_in_a_stage_restores_and_is_one_line_exit_130(tmp_path, monkeypatch, capsys):
    from stages.common import run

    weights = _stage_project(tmp_path, monkeypatch)

    def stage():
        raise KeyboardInterrupt
    try:
        assert run("step", stage) == 130
    finally:
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted by SIGINT" in err and "restored" in err
    assert weights.read_bytes() == b"the previous weights"


def test_sigterm_in_a_stage_is_one_line_exit_143(tmp_path):
    script = ("import sys, time; from stages.common import run; "
              "sys.exit(run('check-params', lambda: (print('up', flush=True), time.sleep(60))))")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "up"
    proc.terminate()
    _, err = proc.communicate(timeout=PROMPT_GUARD_S)
    assert proc.returncode == 143, err
    assert err.count("\n") == 1 and "interrupted by SIGTERM" in err and "Traceback" not in err


# ------------------------------------------------------------ 7. litter of killed runs

def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_next_run_removes_a_killed_runs_temp_files_and_only_those(trained):
    project, weights = trained
    folder = project / "out/litter"
    shutil.copytree(weights.parent, folder)
    stale = [folder / ".weights.safetensors.pending.k3j_9xq1.tmp",
             folder / ".checkpoint.json.a8Zk02lm.tmp"]
    kept = [folder / ".notes.tmp", folder / "mine.tmp"]
    for path in stale + kept:
        path.write_bytes(b"x" * 1000)
    rc, _, err = _apply_step(project, folder / "weights.safetensors")
    assert rc == 0, err
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


def test_export_removes_a_dead_exports_temp_folder_beside_out(trained, tmp_path):
    _, weights = trained
    dead, live = _dead_pid(), os.getpid()
    stale = tmp_path / f".hf.{dead}.abc_1234.tmp"
    alive = tmp_path / f".hf.{live}.abc_1234.tmp"
    other = tmp_path / f".other.{dead}.abc_1234.tmp"
    for path in (stale, alive, other):
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"x")
    rc, _, err = run_spark(["export", "--to", "hf", tmp_path / "hf", "--weights", weights])
    assert rc == 0, err
    assert not stale.exists() and alive.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".hf")) == [alive.name]


# ------------------------------------------------------------ 6. write errors

def test_a_write_error_in_the_step_stage_restores_and_says_so(tmp_path, monkeypatch, capsys):
    from stages.common import run

    weights = _stage_project(tmp_path, monkeypatch)

    def stage():
        raise SparkError(f"cannot write {weights}: No space left on device")
    assert run("step", stage) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left" in err and "restored" in err
    assert weights.read_bytes() == b"the previous weights"


def _limit_file_size():
    import resource
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


@pytest.mark.parametrize("argv", [["export", "--to", "gguf", "OUT/x.gguf", "--weights", "W"],
                                  ["export", "--to", "hf", "OUT/hf", "--weights", "W"]])
def test_export_under_ulimit_f_is_one_line_and_leaves_no_temp(trained, tmp_path, argv):
    _, weights = trained
    argv = [str(weights) if a == "W" else a.replace("OUT", str(tmp_path)) for a in argv]
    # no bytecode written: a module imported first under the limit would leave a cut .pyc
    # in the venv, and every later import of it would fail (marshal data too short)
    done = subprocess.run([sys.executable, "-m", "sparktrain.cli", *argv], capture_output=True,
                          text=True, preexec_fn=_limit_file_size, timeout=PROMPT_GUARD_S,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert_one_line_error(done.returncode, done.stderr, "cannot write")
    assert "EFBIG" in done.stderr or "short write" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_params_typo_is_one_line_without_a_repeated_tail(tmp_path, monkeypatch, capsys):
    """The stage's error is the typo, once: the job folder (read from the same broken
    params.yaml) is not looked up a second time into the line."""
    from stages.common import params, run

    _stage_project(tmp_path, monkeypatch)
    (tmp_path / "params.yaml").write_text(
        (tmp_path / "params.yaml").read_text().replace("  outer: 4", "  oter: 4"))
    try:
        params()
    except SparkError as err:
        typo = str(err)
    assert run("check-params", params) == 2
    assert capsys.readouterr().err == f"stage check-params: error: {typo}\n"
    assert run("step", params) == 2
    assert capsys.readouterr().err == (f"stage step: error: {typo}; `dvc checkout step` brings "
                                       f"back its previous outputs once params.yaml is fixed\n")
