"""Round five, writes: the gate judges where a write really lands, and the writers write
exactly there (docs/outputs.md, "Links").

- a link above an output is resolved and the resolved place judged: into a tracked
  tree, a project's machinery or a job folder is refused, elsewhere lands at the
  resolved place and nowhere else; a job folder is never reached through a link;
- a folder swapped for a link after the check (the race) makes the write fail in one
  line, and the link's target keeps its bytes: a property over every path component
  and every writer helper (atomic file, HF folder, publish-by-name, the commit);
- a path inside a git submodule is refused like a tracked tree;
- --force replaces only what this tool made: an HF folder whose every entry is an
  export's, never a job's own files, a tracked .sparkbc only from its own source;
- a full disk (a write hook that fails with ENOSPC) is one line in every writer;
- a coder job in use or a coder run that fails keeps its tokenizer and corpus; decode-bc
  under a linked out/train writes nothing.
"""
from __future__ import annotations

import errno
import os
import shutil

import pytest

from relkit import FAST, TRAIN, copy_project, git, git_project, snapshot
from sparkhelp import assert_one_line_error, run_spark
from sparktrain.core import fsutil
from sparktrain.core.errors import SparkError
from sparktrain.core.gate import check_output
from sparktrain.core import publish
from sparktrain.train.folder import JobFolder

W = "out/j/weights.safetensors"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A git project with one trained job (out/j) and a folder outside it."""
    root = git_project(tmp_path_factory.mktemp("round5"))
    outside = tmp_path_factory.mktemp("outside")
    (outside / "precious.txt").write_text("not yours\n")
    rc, _, err = run_spark(["export", "--to", "hf", "out/hfsrc", "--weights", W], cwd=root)
    assert rc == 0, err  # what `spark import` reads
    return root, outside


def _link(root, name, target):
    path = root / name
    if os.path.lexists(path):
        path.unlink()
    path.symlink_to(target)
    return path


# ---------------------------------------------------------------- links above an output

FORBIDDEN = {"tracked tree": "data/programs", "machinery": ".git", "job folder": "out/j"}
LINKED = {
    "export gguf": (["export", "--to", "gguf", "lnk/m.gguf", "--weights", W], "m.gguf"),
    "export hf": (["export", "--to", "hf", "lnk/hf", "--weights", W], "hf"),
    "plot": (["plot", "--checkpoint", "out/j/checkpoint.json", "-o", "lnk/p.png"], "p.png"),
    "compile": (["compile", "data/programs/train-step.spark", "-o", "lnk/x.sparkbc"],
                "x.sparkbc"),
    "eval": (["eval", "--weights", W, "--data", "data/train/dataset.jsonl", "--samples", "0",
              "-o", "lnk/e.json"], "e.json"),
    "import": (["import", "--from", "hf", "out/hfsrc", "--out", "lnk/w.safetensors"],
               "w.safetensors"),
}


LINK_CASES = [(name, where) for name in LINKED for where in FORBIDDEN
              if where != "job folder" or name.startswith("export")]  # only artifacts: no job


@pytest.mark.parametrize("name, where", LINK_CASES)
def test_a_link_into_a_forbidden_place_is_judged_where_it_lands(project, name, where):
    root, _ = project
    _link(root, "lnk", root / FORBIDDEN[where])
    try:
        before = snapshot(root / "data") | {"j/" + k: v for k, v in snapshot(root / "out/j").items()}
        rc, _, err = run_spark(LINKED[name][0], cwd=root)
        if name == "compile" and where == "tracked tree":
            # a new program beside the tracked sources is allowed (docs/outputs.md)
            assert rc == 0, err
            (root / FORBIDDEN[where] / LINKED[name][1]).unlink()
        else:
            assert_one_line_error(rc, err)
        after = snapshot(root / "data") | {"j/" + k: v for k, v in snapshot(root / "out/j").items()}
        assert after == before
    finally:
        (root / "lnk").unlink()


@pytest.mark.parametrize("name", LINKED)
def test_a_link_to_an_allowed_place_writes_there_and_only_there(project, name, tmp_path):
    root, _ = project
    _link(root, "lnk", tmp_path)
    try:
        rc, _, err = run_spark(LINKED[name][0], cwd=root)
        assert rc == 0, err
        assert os.path.lexists(tmp_path / LINKED[name][1])
        assert sorted(os.listdir(tmp_path)) == [LINKED[name][1]]
    finally:
        (root / "lnk").unlink()


@pytest.mark.parametrize("name", LINKED)
def test_a_link_two_levels_up_is_judged_where_it_lands(project, name):
    """out/up2 is a link into the project's machinery; out/up2/a/b/<file> would land there."""
    root, _ = project
    link = _link(root, "out/up2", root / ".git")
    try:
        argv = [a.replace("lnk/", "out/up2/a/b/") for a in LINKED[name][0]]
        rc, _, err = run_spark(argv, cwd=root)
        assert_one_line_error(rc, err)
        assert not os.path.lexists(root / ".git/a")
    finally:
        link.unlink()


@pytest.mark.parametrize("depth", [1, 2])
def test_a_job_folder_is_never_reached_through_a_link(project, tmp_path, depth):
    root, outside = project
    (root / "out/deep").mkdir(exist_ok=True)
    link = _link(root, "out/deep/lnk" if depth == 2 else "lnk", outside)
    try:
        job = f"{link.relative_to(root).as_posix()}/a/job"
        rc, _, err = run_spark(TRAIN + ["--out", job] + FAST, cwd=root)
        assert_one_line_error(rc, err, "link")
        assert sorted(os.listdir(outside)) == ["precious.txt"]
    finally:
        link.unlink()


def test_a_program_job_under_a_linked_out_train_is_refused_before_a_write(tmp_path):
    from sparktrain.train.job import check_out

    root = tmp_path / "p"
    (root / "out").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "out/train").symlink_to(elsewhere)
    with pytest.raises(SparkError, match="outside the project's out/"):
        check_out("out/train/j", root)
    assert os.listdir(elsewhere) == []


# ---------------------------------------------------------------- the race: flip after the check

def _write_file(target):
    fsutil.atomic_write_bytes(target / "f.bin", b"new")


def _write_dir(target):
    publish.publish_dir({"config.json": b"{}\n"}, target / "hf")


def _write_by_name(target):
    publish.publish_file(lambda tmp: open(tmp, "wb").write(b"new"), target / "f.gguf")


def _commit(target):
    with JobFolder(target / "job") as job:
        job.commit({"ARTIFACT": b"x\n"})


WRITERS = {"atomic file": _write_file, "HF folder": _write_dir, "file by name": _write_by_name,
           "commit": _commit}


@pytest.mark.parametrize("depth", [0, 1, 2])
@pytest.mark.parametrize("writer", WRITERS)
def test_a_parent_swapped_for_a_link_after_the_check_redirects_no_byte(tmp_path, writer, depth,
                                                                     monkeypatch):
    """For each component of the output's folder: judge the path, then replace that
    component by a link to a folder outside (the same layout below it), then write."""
    base = tmp_path / "base"
    target = base / "a" / "b"
    (target / "job").mkdir(parents=True)
    decoy = tmp_path / "decoy"
    shutil.copytree(base, decoy)
    (decoy / "a" / "b" / "job" / "foreign").write_text("keep\n")
    monkeypatch.chdir(tmp_path)
    check_output(target / "x.png", "png")  # judged while every component is a real folder
    flip = [base, base / "a", target][depth]
    shutil.rmtree(flip)
    flip.symlink_to(decoy / flip.relative_to(base) if flip != base else decoy)
    before = snapshot(decoy)
    with pytest.raises(SparkError, match="symbolic link"):
        WRITERS[writer](target)
    assert snapshot(decoy) == before


def test_a_path_in_a_git_submodule_is_refused(tmp_path):
    root = tmp_path / "super"
    (root / "vendor" / "lib").mkdir(parents=True)
    (root / "dvc.yaml").write_text("stages: {}\n")
    git(root, "init", "-q")
    sha = "0123456789abcdef0123456789abcdef01234567"
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{sha},vendor/lib")
    (root / "vendor" / "lib" / ".git").write_text("gitdir: ../../.git/modules/lib\n")
    for target in ("vendor/lib/m.gguf", "vendor/lib/deeper/m.gguf"):
        with pytest.raises(SparkError, match="submodule"):
            check_output(root / target, "gguf")


# ---------------------------------------------------------------- --force replaces only ours

def test_export_force_onto_a_folder_with_a_readme_keeps_the_users_files(project, tmp_path):
    root, _ = project
    for files in ({"README.md": "# my project\n", "my-notes.txt": "mine\n"},
                  {"README.md": "# my project\n"},
                  {"config.json": '{"model_type": "llama"}\n'}):
        folder = tmp_path / f"user{len(files)}{sorted(files)[0]}"
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        before = snapshot(folder)
        rc, _, err = run_spark(["export", "--to", "hf", folder, "--weights", W, "--force"],
                               cwd=root)
        assert_one_line_error(rc, err, "not an exported Hugging Face folder")
        assert snapshot(folder) == before
    ours = tmp_path / "ours"
    for _ in range(2):  # a folder it wrote itself is replaced
        rc, _, err = run_spark(["export", "--to", "hf", ours, "--weights", W, "--force"],
                               cwd=root)
        assert rc == 0, err


def test_import_never_replaces_a_jobs_weights(project, tmp_path):
    root, _ = project
    hf = tmp_path / "hf"
    rc, _, err = run_spark(["export", "--to", "hf", hf, "--weights", W], cwd=root)
    assert rc == 0, err
    before = snapshot(root / "out/j")
    rc, _, err = run_spark(["import", hf, "--from", "hf", "--out", W, "--force"], cwd=root)
    assert_one_line_error(rc, err, "inside the job folder")
    assert snapshot(root / "out/j") == before


def test_compile_onto_another_sources_tracked_program_is_refused(project):
    root, _ = project
    other = root / "data/programs/train-step.sparkbc"
    before = other.read_bytes()
    sources = sorted(p.name for p in (root / "data/programs").glob("*.spark")
                     if p.stem != "train-step")
    assert sources, "needs a second program source"
    rc, _, err = run_spark(["compile", f"data/programs/{sources[0]}", "-o",
                            "data/programs/train-step.sparkbc"], cwd=root)
    assert_one_line_error(rc, err, "git tracks")
    assert other.read_bytes() == before


# ---------------------------------------------------------------- a full disk: one line

@pytest.fixture
def full_disk(monkeypatch):
    """Every write through the writers' helpers fails as on a full disk."""
    def no_space(*_args, **_kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    return no_space


@pytest.mark.parametrize("writer", WRITERS)
def test_a_full_disk_is_one_line_and_leaves_nothing_half_made(tmp_path, writer, full_disk,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "t"
    (target / "job").mkdir(parents=True)
    with pytest.raises(SparkError, match="ENOSPC"):
        WRITERS[writer](target)
    left = {p.name for p in target.rglob("*")} - {"job", ".lock"}
    assert not any(n.endswith((".tmp", ".pending")) for n in left), left


# ---------------------------------------------------------------- knobs before the first write

@pytest.mark.parametrize("env", [{"SPARK_WORKERS": "0"}, {"SPARK_WORKERS": "abc"},
                                 {"SPARK_WORKERS": "1e9"}])
def test_code_train_checks_its_knobs_before_it_writes_the_job(tmp_path, env):
    root = copy_project(tmp_path / "p")
    rc, _, err = run_spark(["code", "train", "--scale", "tiny"], cwd=root, env=env)
    assert_one_line_error(rc, err, "SPARK_WORKERS")
    assert not (root / "out").exists()


@pytest.mark.parametrize("argv", [["code", "train", "--scale", ""],
                                  TRAIN + ["--scale", "", "--out", "out/x"]])
def test_an_empty_scale_is_refused(tmp_path, argv):
    root = copy_project(tmp_path / "p")
    rc, _, err = run_spark(argv, cwd=root)
    assert_one_line_error(rc, err, "--scale")
    assert not (root / "out").exists()


def test_blas_threads_are_bounded_like_workers(tmp_path):
    rc, _, err = run_spark(["status"], cwd=copy_project(tmp_path / "p"),
                           env={"SPARK_BLAS_THREADS": "999999999999"})
    assert_one_line_error(rc, err, "SPARK_BLAS_THREADS")


def test_a_huge_columns_does_not_size_the_bar():
    import io

    from sparktrain.core.progress import MAX_COLUMNS, terminal_width

    os.environ["COLUMNS"], old = "1000000000", os.environ.get("COLUMNS")
    try:
        assert terminal_width(io.StringIO()) == MAX_COLUMNS
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


# ---------------------------------------------------------------- a coder job stays whole

def _coder_job(root):
    """A copy of the project whose tiny coder job holds a tokenizer and a corpus."""
    copy_project(root)
    job = root / "out/train/job-coder-tiny"
    (job / "corpus").mkdir(parents=True)
    (job / "tokenizer.json").write_text('{"ours": true}\n')
    (job / "corpus/files.json").write_text("[]\n")
    return job


def _files(job):
    """The job's files but its lock file (it stays, by design: docs/outputs.md)."""
    return {k: v for k, v in snapshot(job).items() if k != ".lock"}


def test_a_second_code_train_on_a_job_in_use_touches_nothing(tmp_path):
    job = _coder_job(tmp_path)
    before = _files(job)
    with JobFolder(job):  # the run in progress
        rc, _, err = run_spark(["code", "train", "--scale", "tiny"], cwd=tmp_path)
        assert_one_line_error(rc, err, "in use")
    assert _files(job) == before


def test_a_code_train_whose_corpus_fails_keeps_the_jobs_tokenizer_and_corpus(tmp_path):
    import yaml

    job = _coder_job(tmp_path)
    recipe = yaml.safe_load((tmp_path / "data/programs/coder-recipes.yaml").read_text())["tiny"]
    recipe["corpus"]["glob"] = "*.nothing-matches"
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(recipe))
    before = _files(job)
    rc, _, err = run_spark(["code", "train", "--params", "other.yaml"], cwd=tmp_path)
    assert_one_line_error(rc, err)
    assert _files(job) == before


def test_decode_bc_under_a_linked_out_train_writes_nothing(tmp_path):
    import subprocess
    import sys

    from sparkhelp import ROOT

    root = tmp_path / "p"
    root.mkdir()
    copy_project(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "out").mkdir()
    (root / "out/train").symlink_to(elsewhere)
    p = subprocess.run([sys.executable, "-m", "stages.decode_bc"], cwd=root, text=True,
                       capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       timeout=300)
    assert_one_line_error(p.returncode, p.stderr)
    assert os.listdir(elsewhere) == []


def test_export_force_onto_an_hf_folder_that_became_a_link_keeps_the_foreign_file(project,
                                                                               tmp_path):
    root, _ = project
    ours, decoy = tmp_path / "ours", tmp_path / "decoy"
    rc, _, err = run_spark(["export", "--to", "hf", ours, "--weights", W], cwd=root)
    assert rc == 0, err
    shutil.copytree(ours, decoy)
    (decoy / "foreign.txt").write_text("keep\n")
    shutil.rmtree(ours)
    ours.symlink_to(decoy)
    before = snapshot(decoy)
    rc, _, err = run_spark(["export", "--to", "hf", ours, "--weights", W, "--force"], cwd=root)
    assert_one_line_error(rc, err)
    assert snapshot(decoy) == before
