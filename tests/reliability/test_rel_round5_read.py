"""Round five, reads and paths (issue 35): what a command reads is sized before it
is read and checked before it is used; file names that are not UTF-8; every
writing command under a folder that flips to a link while it writes.

- experiments (`spark compare`) are listed from git's refs and their params.yaml
  read from the git blob through the bounded loader, its size asked first, before
  DVC opens the rev (DVC would parse an alias bomb in full);
- `spark repro-check`: a committed dvc.lock and the cached outputs sized first;
- a headline value in an experiment's eval.json that is not a finite number is
  one line, in the table and in --json;
- the knobs round five found loose stay bounded (terminal width, BLAS threads,
  --scale '', the loader's duplicates, merge keys, long values);
- a property: each component of an output path flips between a folder and a link
  while the command writes; no byte lands outside the approved place.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from relkit import FAST, TRAIN, copy_project, snapshot
from sparkhelp import PROMPT_GUARD_S, assert_one_line_error, run_spark

BOMB = ("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                  for p, c in zip("abcdefg", "bcdefgh")))
ENV = {"DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _git(cwd, *args, stdin=None, env=None):
    done = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True,
                          env={**os.environ, **ENV, **(env or {})}, timeout=PROMPT_GUARD_S)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def _cache(project, data: bytes) -> dict:
    md5 = hashlib.md5(data).hexdigest()
    blob = project / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    return {"hash": "md5", "md5": md5, "size": len(data)}


def _outputs(project, files: dict) -> bytes:
    """A dvc.lock recording `files` (path -> bytes) as one stage's outputs, in the cache."""
    outs = [{"path": path, **_cache(project, data)} for path, data in files.items()]
    return json.dumps({"schema": "2.0", "stages": {"s": {"cmd": "true", "outs": outs}}}).encode()


def experiment(project, name: str, files: dict) -> str:
    """An experiment `name` on HEAD whose commit changes `files` (path -> bytes), made
    with git's plumbing the way `dvc exp run` stores one: refs/exps/<base>/<name>."""
    base = _git(project, "rev-parse", "HEAD")
    env = {"GIT_INDEX_FILE": str(project / ".git/exp-index")}
    _git(project, "read-tree", "HEAD", env=env)
    for path, data in files.items():
        sha = _git(project, "hash-object", "-w", "--stdin", stdin=data)
        _git(project, "update-index", "--add", "--cacheinfo", f"100644,{sha},{path}", env=env)
    tree = _git(project, "write-tree", env=env)
    commit = _git(project, "commit-tree", tree, "-p", base, "-m", name)
    _git(project, "update-ref", f"refs/exps/{base[:2]}/{base[2:]}/{name}", commit)
    return commit


def _run_files(project, params: bytes, eval_json: bytes) -> dict:
    ckpt = json.dumps({"loss_curve": [{"outer": 0, "loss": 2.0}, {"outer": 1, "loss": 1.5}]})
    lock = _outputs(project, {"out/train/j/eval.json": eval_json,
                              "out/train/j/checkpoint.json": ckpt.encode()})
    return {"params.yaml": params, "dvc.lock": lock}


@pytest.fixture(scope="module")
def exps(tmp_path_factory):
    """A git + DVC project (no dvc run: the experiments are made with git) with a
    good experiment `good`."""
    root = tmp_path_factory.mktemp("exps")
    _git(root, "init", "-q")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True,
                   env={**os.environ, **ENV}, timeout=PROMPT_GUARD_S)
    (root / "params.yaml").write_text("job: j\nstep:\n  lr: 0.1\n")
    (root / "dvc.yaml").write_text("stages:\n  s:\n    cmd: 'true'\n    outs:\n"
                                   "    - out/train/j/eval.json\n"
                                   "    - out/train/j/checkpoint.json\n")
    (root / ".gitignore").write_text("/out\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    experiment(root, "good", _run_files(root, b"job: j\nstep:\n  lr: 0.2\n",
                                        b'{"loss": 1.25, "bpb": 1.5}'))
    return root


def test_compare_lists_experiments_from_git_and_reads_them(exps):
    rc, out, err = run_spark(["compare", "good", "--json"], cwd=exps, timeout=PROMPT_GUARD_S)
    assert rc == 0, err
    got = json.loads(out)["experiments"]
    assert [(e["name"], e["metrics"]) for e in got] == [("good", {"loss": 1.25, "bpb": 1.5})]


NOT_FINITE = ["1e400", "NaN", '"low"', "true"]


@pytest.mark.parametrize("value", NOT_FINITE)
def test_a_headline_value_that_is_not_a_finite_number_is_one_line(exps, value):
    name = f"bad{NOT_FINITE.index(value)}"
    experiment(exps, name, _run_files(exps, b"job: j\nstep:\n  lr: 0.3\n",
                                      f'{{"loss": 1.0, "bpb": {value}}}'.encode()))
    for extra in (["--json"], ["-o", "out/c.png"]):
        rc, out, err = run_spark(["compare", name, *extra], cwd=exps, timeout=PROMPT_GUARD_S)
        assert_one_line_error(rc, err, name)
        assert "bpb" in err or "NaN" in err, err
        assert out == ""
    assert not (exps / "out/c.png").exists()


def _peak_kb(err: str) -> int:
    line = next(ln for ln in err.splitlines() if "Maximum resident set size" in ln)
    return int(line.rsplit(":", 1)[1])


def _time_v(args, cwd):
    """`spark ARGS` under /usr/bin/time -v: (rc, the command's stderr lines, peak RSS KiB)."""
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "sparktrain.cli",
                           *args], cwd=cwd, capture_output=True, text=True,
                          timeout=PROMPT_GUARD_S, env={**os.environ, **ENV})
    own = "".join(ln for ln in done.stderr.split("\tCommand being timed")[0].splitlines(True)
                  if not ln.startswith("Command exited with"))
    return done.returncode, own, _peak_kb(done.stderr)


needs_time = pytest.mark.skipif(not os.access("/usr/bin/time", os.X_OK),
                                reason="/usr/bin/time is not installed")


@needs_time
def test_an_experiments_alias_bomb_is_refused_before_anything_parses_it(exps):
    experiment(exps, "bomb", {"params.yaml": BOMB.encode()})
    rc, err, peak = _time_v(["compare", "bomb"], exps)
    assert_one_line_error(rc, err, "params.yaml at", "alias")
    assert peak < 400_000, f"peak RSS {peak} KiB"        # 10**8 nodes expanded: gigabytes


def test_a_huge_params_blob_is_refused_by_its_size(exps):
    from sparktrain.eval.experiments import DvcExperiments, read_params

    commit = experiment(exps, "huge", {"params.yaml": b"job: j\n" + b"#" * (17 << 20)})
    with DvcExperiments(str(exps)) as source:
        with pytest.raises(Exception, match="bytes, above the"):
            read_params(source, commit)


# ---------------------------------------------------------------- repro-check sizes

@pytest.fixture
def locked(tmp_path):
    _git(tmp_path, "init", "-q")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True,
                   env={**os.environ, **ENV}, timeout=PROMPT_GUARD_S)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    return tmp_path


@needs_time
def test_repro_check_refuses_a_huge_committed_lock_by_its_size(locked):
    (locked / "dvc.lock").write_bytes(b"schema: '2.0'\n" + b"#" * (40 << 20))
    _git(locked, "add", "-A")
    _git(locked, "commit", "-qm", "big lock")
    rc, err, peak = _time_v(["repro-check"], locked)
    assert_one_line_error(rc, err, "dvc.lock at HEAD", "bytes, above the")
    assert peak < 200_000, f"peak RSS {peak} KiB"


def test_repro_check_refuses_a_huge_cached_weights_file_by_its_size(locked, monkeypatch):
    from sparktrain.repro import check
    from sparktrain.repro.dvclock import Output

    md5 = "ab" * 16
    blob = locked / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    blob.parent.mkdir(parents=True)
    with open(blob, "wb") as f:       # sparse: 3 GB that take no disk
        f.truncate(3 << 30)
    monkeypatch.chdir(locked)
    read = check.cache_reader()
    with pytest.raises(check.SparkError, match="weights file is 3,221,225,472 bytes"):
        read(Output("out/train/j/weights.safetensors", "step", md5, False))


def test_a_weights_output_that_is_not_safetensors_is_one_line():
    from sparktrain.repro import check

    with pytest.raises(check.SparkError, match="not a safetensors file"):
        check.compare_safetensors(b"\0" * 64, b"\0" * 64)


def test_every_git_call_has_a_timeout(monkeypatch):
    from sparktrain.core.errors import SparkError
    from sparktrain.repro import dvclock, toolenv

    def hang(*args, **kw):
        assert kw.get("timeout") == toolenv.GIT_TIMEOUT == dvclock.DVC_TIMEOUT
        raise subprocess.TimeoutExpired(args[0], kw["timeout"])

    monkeypatch.setattr(subprocess, "run", hang)
    with pytest.raises(SparkError, match="took over 60 s"):
        toolenv.git_blob("HEAD", "dvc.lock")
    with pytest.raises(SparkError, match="took over 60 s"):
        dvclock.cache_dir()


# ---------------------------------------------------------------- names that are not UTF-8

def test_a_corpus_file_name_that_is_not_utf8_is_one_line(tmp_path):
    from sparktrain.core.errors import SparkError
    from sparktrain.data.corpus import read_corpus

    for name in (b"a.py", b"b.py", b"\xff.py"):
        (tmp_path / os.fsdecode(name)).write_text("x = 1\n")
    with pytest.raises(SparkError, match=r"corpus file name \\xff.py is not UTF-8"):
        read_corpus(str(tmp_path), ["*.py"], 0.5)
    assert len(read_corpus(str(tmp_path), ["[ab].py"], 0.5).files) == 2   # the rest reads


@pytest.mark.parametrize("glob", [".", "./", ""])
def test_a_corpus_glob_of_no_name_is_one_line(tmp_path, glob):
    from sparktrain.core.errors import SparkError
    from sparktrain.data.corpus import read_corpus

    (tmp_path / "a.py").write_text("x = 1\n")
    with pytest.raises(SparkError, match="must be a relative pattern"):
        read_corpus(str(tmp_path), [glob], 0.5)


def test_a_dataset_name_that_is_not_utf8_is_refused_before_the_job_exists(tmp_path):
    project = copy_project(tmp_path)
    bad = os.fsdecode(b"data/train/\xff.jsonl")
    shutil.copy(project / "data/train/dataset.jsonl", project / bad)
    rc, _, err = run_spark(["train", "--dataset", bad, "--out", "out/j"] + FAST, cwd=project,
                           timeout=PROMPT_GUARD_S)
    assert_one_line_error(rc, err, "\\xff.jsonl is not UTF-8")
    assert not (project / "out").exists()


# ---------------------------------------------------------------- round five's loose knobs

def test_a_billion_column_terminal_sizes_no_bar_of_that_width(tmp_path):
    import pty

    master, slave = pty.openpty()
    stats = tmp_path / "time.txt"
    proc = subprocess.Popen(
        ["/usr/bin/time", "-v", "-o", str(stats), sys.executable, "-m", "sparktrain.cli",
         *TRAIN, "--out", str(tmp_path / "o"), *FAST], cwd=Path(__file__).parents[2],
        env={**os.environ, "COLUMNS": "1000000000", "TERM": "xterm"}, stdout=slave,
        stderr=slave)
    os.close(slave)
    text = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        text += chunk
    os.close(master)
    assert proc.wait(timeout=PROMPT_GUARD_S) == 0, text[-2000:]
    redraws = text.replace(b"\r", b"\n").split(b"\n")        # each redraw of the bar
    assert max(len(ln) for ln in redraws) < 4000                # clamped to 1,000 columns
    assert _peak_kb(stats.read_text()) < 600_000


@pytest.mark.parametrize("args, env, needle", [
    (["status"], {"SPARK_BLAS_THREADS": "999999999999"}, "SPARK_BLAS_THREADS"),
    (["code", "train", "--scale", ""], {}, "--scale"),
])
def test_a_loose_knob_is_one_line(tmp_path, args, env, needle):
    project = copy_project(tmp_path)
    rc, _, err = run_spark(args, cwd=project, env=env, timeout=PROMPT_GUARD_S)
    assert_one_line_error(rc, err, needle)
    assert not (project / "out").exists()


@pytest.mark.parametrize("text, needle", [
    ('corpus: {glob: "*.py", glob: "**/*.py"}\n', "'glob' is given twice"),
    ("scales:\n  tiny:\n    d_model: 8\n    d_model: 16\n", "'d_model' is given twice"),
    ("base: &b {lr: 0.1}\nstep:\n  <<: *b\n", "params.yaml:3:"),          # merge via alias
    ("step:\n  <<: {lr: 0.1}\n", "merge key << is not supported"),
])
def test_the_loader_refuses_at_every_depth_and_names_the_line(text, needle):
    from sparktrain.core.errors import SparkError
    from sparktrain.core.safeload import load_yaml

    with pytest.raises(SparkError, match=needle):
        load_yaml(text, "params.yaml")


def test_a_900000_character_value_is_not_echoed_whole(tmp_path):
    project = copy_project(tmp_path)
    params = project / "long.yaml"
    params.write_text((project / "params.yaml").read_text()
                      .replace("tokenizer: byte", f"tokenizer: {'x' * 900_000}"))
    rc, _, err = run_spark(["code", "train", "--params", params], cwd=project,
                           timeout=PROMPT_GUARD_S)
    assert_one_line_error(rc, err, "tokenizer", "xxx")
    assert len(err) < 1100       # core/errors.py's MAX_MESSAGE, whatever a message quotes
    assert not (project / "out").exists()


# ---------------------------------------------------------------- the property: flip while writing

W = "out/j/weights.safetensors"
# every writing command, its output under out/r/a/ (NAME: a fresh name per run)
WRITING = {
    "export hf": ["export", "--to", "hf", "out/r/a/NAME", "--weights", W],
    "export gguf": ["export", "--to", "gguf", "out/r/a/NAME.gguf", "--weights", W],
    "import": ["import", "--from", "hf", "out/hf0", "--out", "out/r/a/NAME.safetensors"],
    "eval": ["eval", "--weights", W, "--data", "data/eval/tiny_heldout.jsonl",
             "--max-new", "2", "-o", "out/r/a/NAME.json"],
    "plot": ["plot", "--checkpoint", "out/j/checkpoint.json", "-o", "out/r/a/NAME.png"],
    "compile": ["compile", "data/programs/train-step.spark", "-o", "out/r/a/NAME.sparkbc"],
    "train": [*TRAIN, "--out", "out/r/a/NAME", *FAST],
    "compare": ["compare", "good", "-o", "out/r/a/NAME.png"],
}


@pytest.fixture(scope="module")
def flipping(exps):
    """The experiments project, with the data, a trained job out/j and an HF export."""
    for sub in ("data",):
        shutil.copytree(Path(__file__).parents[2] / sub, exps / sub)
    rc, _, err = run_spark(TRAIN + ["--out", "out/j"] + FAST, cwd=exps, timeout=PROMPT_GUARD_S)
    assert rc == 0, err
    rc, _, err = run_spark(["export", "--to", "hf", "out/hf0", "--weights", W], cwd=exps,
                           timeout=PROMPT_GUARD_S)
    assert rc == 0, err
    return exps


class Flipper(threading.Thread):
    """Swaps folder `path` for a link to `decoy` (a forbidden place: inside .git/) and
    back, over and over, until stopped; always ends with the real folder back."""

    def __init__(self, path: Path, decoy: Path):
        super().__init__(daemon=True)
        self.path, self.decoy, self.held = path, decoy, path.with_name(path.name + ".held")
        self.halt, self.flips = threading.Event(), 0

    def run(self):
        while not self.halt.is_set():
            try:
                os.rename(self.path, self.held)
                os.symlink(self.decoy, self.path)
                time.sleep(0.0005)
                os.unlink(self.path)
                os.rename(self.held, self.path)
                self.flips += 1
            except OSError:    # the command made or moved something there first: retry
                pass
            time.sleep(0.0005)

    def stop(self):
        self.halt.set()
        self.join()
        if self.path.is_symlink():
            self.path.unlink()
        if self.held.exists():
            if self.path.is_dir():   # the command made the folder anew in the gap: keep both
                _merge(self.path, self.held)
            os.rename(self.held, self.path)


def _merge(src: Path, dest: Path) -> None:
    """Move every entry of folder `src` into folder `dest`, then remove `src`."""
    for entry in src.iterdir():
        if entry.is_dir() and (dest / entry.name).is_dir():
            _merge(entry, dest / entry.name)
        else:
            os.rename(entry, dest / entry.name)
    src.rmdir()


@pytest.mark.parametrize("command", WRITING)
def test_no_byte_lands_outside_while_a_folder_flips_to_a_link(flipping, command, monkeypatch,
                                                             capsys):
    """For each component of the output's folder (out/r, out/r/a): run the command
    in-process while a thread flips that component between the real folder and a
    link into .git/ (never an output); whatever the timing, .git/ keeps its bytes, and
    the run either wrote its output at the real place or refused in one line. (train:
    DVCLive writes by path, through the job folder pinned by a descriptor.)"""
    from sparktrain.cli import main

    monkeypatch.chdir(flipping)
    decoy = flipping / ".git/decoy"
    (decoy / "a").mkdir(parents=True, exist_ok=True)
    (flipping / "out/r/a").mkdir(parents=True, exist_ok=True)
    git_before = snapshot(flipping / ".git")
    outcomes = []
    for component in ("out/r", "out/r/a"):
        target = decoy if component == "out/r" else decoy / "a"
        for i in range(3):
            name = f"{command.split()[0]}-{component.count('/')}-{i}"
            argv = [a.replace("NAME", name) for a in WRITING[command]]
            flipper = Flipper(flipping / component, target)
            flipper.start()
            try:
                time.sleep(0.002)
                rc = main(argv)
            finally:
                flipper.stop()
            err = capsys.readouterr().err
            assert flipper.flips > 0, "the folder never flipped during the run"
            assert "Traceback" not in err
            assert snapshot(flipping / ".git") == git_before, f"{argv}: wrote into .git/"
            made = [p for p in (flipping / "out/r/a").iterdir() if p.name.startswith(name)]
            if rc == 0:
                assert made, f"{argv}: rc 0 but nothing at the real place"
            else:
                # refused in one line (train's progress lines come before it)
                assert rc == 2 and "error" in err.strip().splitlines()[-1], (argv, rc, err)
            outcomes.append(rc)
    print(command, outcomes)


@pytest.mark.parametrize("linked", ["out", "out/train", "out/train/j"])
def test_a_pipeline_job_folder_reached_through_a_link_is_refused(tmp_path, linked):
    """`dvc repro`'s job folder (out/train/<job>): out/, out/train or the job folder
    itself a link to a folder outside is refused by check_out before any write."""
    from sparktrain.core.errors import SparkError
    from sparktrain.train.job import check_out

    root, elsewhere = tmp_path / "p", tmp_path / "elsewhere"
    (root / linked).parent.mkdir(parents=True)
    (elsewhere / "train/j").mkdir(parents=True)
    (root / linked).symlink_to(elsewhere / linked.removeprefix("out").lstrip("/"))
    with pytest.raises(SparkError, match="outside the project's out/|link"):
        check_out("out/train/j", root)
    assert snapshot(elsewhere) == {}
