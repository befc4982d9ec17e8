"""Round four, writes: every command that writes a user-named path goes through the
one output gate (sparktrain/core/gate.py, docs/outputs.md "The output gate").

The property: for every writing command and every forbidden target (a FIFO, a
git-tracked file, a link pointing out, one of the command's own inputs), the
command exits 2 with one line and the target and every input keep their bytes.
Only FIFOs made here and files under tmp dirs are ever offered as targets.
"""
from __future__ import annotations

import os
import shutil
import stat

import pytest

from relkit import FAST, TRAIN, git_project, snapshot
from sparkhelp import assert_one_line_error, run_spark

W, D, C, SRC = ("out/j/weights.safetensors", "data/train/dataset.jsonl",
                "out/j/checkpoint.json", "data/programs/train-step.spark")

# every writing command, OUT where the user names the output
WRITERS = {
    "export gguf": ["export", "--to", "gguf", "OUT", "--weights", W, "--force"],
    "export hf": ["export", "--to", "hf", "OUT", "--weights", W, "--force"],
    "import": ["import", "out/hf", "--from", "hf", "--out", "OUT", "--force"],
    "plot": ["plot", "--checkpoint", C, "-o", "OUT"],
    "compare": ["compare", "-o", "OUT"],
    "eval": ["eval", "--weights", W, "--data", D, "-o", "OUT"],
    "compile": ["compile", SRC, "-o", "OUT"],
    "train": TRAIN + ["--out", "OUT"] + FAST,
    "sweep": ["sweep", "-S", "step.lr=0.1", "-o", "OUT"],
}
# each command's own inputs, offered as its output
OWN_INPUT = {"export gguf": W, "export hf": "out/j", "import": "out/hf", "plot": C,
             "compare": None, "eval": D, "compile": SRC, "train": D, "sweep": None}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A git project with one trained job (out/j), its HF export (out/hf), a FIFO, a
    link pointing out of the project, and params.yaml tracked."""
    root = git_project(tmp_path_factory.mktemp("gate"))
    (root / ".dvc").mkdir(exist_ok=True)
    rc, _, err = run_spark(["export", "--to", "hf", "out/hf", "--weights", W], cwd=root)
    assert rc == 0, err
    os.mkfifo(root / "fifo")
    outside = tmp_path_factory.mktemp("outside") / "precious.txt"
    outside.write_text("not yours\n")
    (root / "link").symlink_to(outside)
    return root, outside


def _targets(name):
    targets = {"fifo": "fifo", "tracked": "params.yaml", "link-out": "link"}
    if OWN_INPUT[name]:
        targets["own input"] = OWN_INPUT[name]
    return targets


CASES = [(name, kind) for name in WRITERS for kind in ("fifo", "tracked", "link-out",
                                                        "own input")
         if kind != "own input" or OWN_INPUT[name]]


@pytest.mark.parametrize("name, kind", CASES)
def test_every_writer_refuses_every_forbidden_target(project, name, kind):
    root, outside = project
    target = _targets(name)[kind]
    before = snapshot(root)
    outside_before = outside.read_bytes()
    argv = [target if a == "OUT" else a for a in WRITERS[name]]
    rc, out, err = run_spark(argv, cwd=root)
    assert_one_line_error(rc, err)
    assert stat.S_ISFIFO(os.lstat(root / "fifo").st_mode)
    assert os.path.islink(root / "link") and outside.read_bytes() == outside_before
    assert snapshot(root) == before, f"{name} changed files writing {target}"


def test_compare_o_over_trained_weights_and_under_a_file_are_one_line(project):
    root, _ = project
    before = snapshot(root)
    for target, needle in ((W, "not a PNG this tool wrote"), ("params.yaml/x.png", "not a folder")):
        rc, _, err = run_spark(["compare", "-o", target], cwd=root)
        assert_one_line_error(rc, err, needle)
    assert snapshot(root) == before


def test_export_replaces_only_what_it_wrote(project, tmp_path):
    root, _ = project
    foreign = tmp_path / "notes.gguf"
    foreign.write_text("my notes\n")
    rc, _, err = run_spark(["export", "--to", "gguf", foreign, "--weights", W, "--force"],
                           cwd=root)
    assert_one_line_error(rc, err, "not a GGUF file this tool wrote")
    assert foreign.read_text() == "my notes\n"
    ours = tmp_path / "model.gguf"
    for _ in range(2):  # a new path, then the file it wrote itself (with --force)
        rc, _, err = run_spark(["export", "--to", "gguf", ours, "--weights", W, "--force"],
                               cwd=root)
        assert rc == 0, err
    assert ours.read_bytes()[:4] == b"GGUF"


def test_a_new_path_in_a_tracked_source_folder_is_refused(project):
    root, _ = project
    rc, _, err = run_spark(["export", "--to", "gguf", "data/m.gguf", "--weights", W], cwd=root)
    assert_one_line_error(rc, err, "data/ folder")
    assert not (root / "data/m.gguf").exists()


def test_train_refuses_a_foreign_folder_and_keeps_it(project, tmp_path):
    root, _ = project
    folder = root / "out/mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work\n")
    rc, _, err = run_spark(TRAIN + ["--out", "out/mine"] + FAST, cwd=root)
    assert_one_line_error(rc, err, "not a job folder this tool wrote")
    assert sorted(p.name for p in folder.iterdir()) == ["thesis.tex"]


@pytest.mark.parametrize("make", ["file", "link"])
def test_dvclive_that_is_not_our_folder_is_refused_before_training(project, tmp_path, make):
    root, outside = project
    job = root / f"out/live-{make}"
    shutil.copytree(root / "out/j", job)
    shutil.rmtree(job / "dvclive", ignore_errors=True)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("keep\n")
    if make == "file":
        (job / "dvclive").write_text("a file\n")
    else:
        (job / "dvclive").symlink_to(target)
    before = snapshot(job)
    rc, _, err = run_spark(TRAIN + ["--out", f"out/live-{make}"] + FAST, cwd=root)
    assert_one_line_error(rc, err, "dvclive")
    assert snapshot(job) == before
    assert (target / "keep.txt").read_text() == "keep\n"
    assert not (job / ".live-run").exists()


def test_code_train_refuses_shards_before_rewriting_the_job(project):
    root, _ = project
    job = root / "out/train/job-coder-tiny"  # the coder job of data/programs/train-coder
    job.mkdir(parents=True)
    (job / "tokenizer.json").write_text('{"spark_tokenizer": "byte"}\n')
    (job / "corpus").mkdir()
    (job / "corpus" / "files.json").write_text("{}\n")
    before = snapshot(job)
    for shards in ("65537", "100000000"):
        rc, _, err = run_spark(["code", "train", "--shards", shards, "--device", "cpu"],
                               cwd=root)
        assert_one_line_error(rc, err, "shards")
        assert snapshot(job) == before


def test_machinery_is_judged_from_the_nearest_project(tmp_path):
    """DVC runs a queued experiment in a clone of its own under .dvc/tmp/exps/: that
    clone's out/ is an output like any other, while the outer project's .dvc/ and
    .git/ stay refused."""
    from sparktrain.core.errors import SparkError
    from sparktrain.core.gate import check_output

    outer = tmp_path / "proj"
    clone = outer / ".dvc" / "tmp" / "exps" / "run" / "abc"
    (clone / "out").mkdir(parents=True)
    for root in (outer, clone):
        (root / "dvc.yaml").write_text("stages: {}\n")
        (root / ".git").mkdir(exist_ok=True)
    check_output(clone / "out" / "train" / "j", "job", [])
    for inside in (outer / ".dvc" / "cache" / "x.png", outer / ".git" / "x.png"):
        (inside.parent).mkdir(parents=True, exist_ok=True)
        with pytest.raises(SparkError, match="machinery"):
            check_output(inside, "png", [])


def test_compile_replaces_a_tracked_program_but_no_other_tracked_file(project, tmp_path):
    """A compiled program is committed beside its .spark (the pipeline's input), so
    `spark compile -o` may replace a tracked .sparkbc; a tracked file that is not a
    SPARK_BC program (params.yaml) stays refused and keeps its bytes."""
    root, _ = project
    rc, _, err = run_spark(["compile", SRC, "-o", str(tmp_path / "fresh.sparkbc")], cwd=root)
    assert rc == 0, err
    compiled = root / "data/programs/train-step.sparkbc"
    compiled.write_bytes(compiled.read_bytes()[:-1] + b"\x00")  # an older build of it
    rc, _, err = run_spark(["compile", SRC, "-o", "data/programs/train-step.sparkbc"], cwd=root)
    assert rc == 0, err
    assert compiled.read_bytes() == (tmp_path / "fresh.sparkbc").read_bytes()
    before = (root / "params.yaml").read_bytes()
    rc, _, err = run_spark(["compile", SRC, "-o", "params.yaml"], cwd=root)
    assert_one_line_error(rc, err, "params.yaml")
    assert (root / "params.yaml").read_bytes() == before
