"""Round five, the training side: a write that fails is one line and leaves the job
whole, a dead run's leftovers never break the next one (docs/outputs.md).

1. A full, read-only or failing disk (ENOSPC, EROFS; EACCES, EIO, EDQUOT from a
   write hook) anywhere in the loop, the live writer, the commit, a stage and every
   writing command: exit 1 or 2, one error line, no traceback; a job folder this run
   made is gone, an existing job keeps its verified outputs, no temp file stays.
   The disk is a small tmpfs mounted on the project's out/ (skipped where mount is
   not allowed), filled to a few sizes so the write that fails moves along the run.
2. A resumed run whose pending DVCLive series were tampered with (garbage, 1e400, a
   torn line, a huge file, a link) rebuilds them from its state: the series a whole
   run writes.
3. A torn or malformed resume state (cut to 100 bytes, 1e400, wrong types) is
   discarded with one line and the run starts clean: the whole run's bytes.
4. Every knob is checked before the first write: SPARK_WORKERS and a warm-up longer
   than the run leave no job folder, and an existing one unchanged.
5. A SIGKILLed in-place apply-step leaves .live-run; the next run cleans it whatever
   it is (a folder with junk, a file, a link), and nothing stale stays.
6. A .live-run component (or a file DVCLive writes) swapped for a link during the
   run redirects no byte: the run stops in one line, the link's target unchanged.
"""
from __future__ import annotations

import builtins
import errno
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from relkit import (FAST, TRAIN, copy_project, git_project, killed_in_pass_two,  # noqa: F401
                    snapshot, train_j, trained)
from sparkhelp import ROOT, assert_one_line_error, run_spark
from sparktrain.train import jobstate, live, outputs
from sparktrain.train.folder import JobFolder

D, PROGRAM = "data/train/dataset.jsonl", "data/programs/train-step.sparkbc"
SERIES = "dvclive/plots/metrics"


def stopped_on_a_write(rc, err, *needles):
    """Exit 1 or 2, no traceback, and the one error line last (a run's progress lines
    may come before it)."""
    assert rc in (1, 2), f"exit {rc}: {err}"
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln]
    assert errors == lines[-1:], err
    for n in needles:
        assert n in lines[-1], lines[-1]


def leftovers(folder):
    """Temp, pending and journal files under `folder` (a half-made write)."""
    return sorted(p.name for p in folder.rglob("*")
                  if p.name.endswith((".tmp", ".pending")) or p.name == ".commit")


def verified(folder):
    state = jobstate.job_state(folder)
    return state["state"] == "trained" and state["weights_verified"]


# ---------------------------------------------------------------- 1. a full disk

FILL = ".fill"


def listing(folder):
    return sorted(set(os.listdir(folder)) - {FILL})


class Disk:
    """A tmpfs on `path`: `free(k)` leaves about k KiB free, `readonly()` remounts it
    read-only."""

    def __init__(self, path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._mount("size=4m")

    def _mount(self, opts, remount=False):
        args = ["mount", "-o", f"remount,{opts}", str(self.path)] if remount else \
            ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(self.path)]
        return subprocess.run(args, capture_output=True).returncode == 0

    def free(self, kib):
        """About `kib` KiB left free (0: none, a page of filler `.fill` takes the last)."""
        (self.path / FILL).unlink(missing_ok=True)
        st = os.statvfs(self.path)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        assert self._mount(f"size={used + kib * 1024 + 4096}", remount=True)
        if kib == 0:
            (self.path / FILL).write_bytes(b"\0" * 4096)

    def readonly(self):
        assert self._mount("ro", remount=True)

    def close(self):
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def disk(tmp_path):
    """A project copy whose out/ is a small tmpfs: (project, Disk)."""
    root = copy_project(tmp_path / "p")
    d = Disk(root / "out")
    if not os.path.ismount(root / "out"):
        pytest.skip("mount -t tmpfs is not allowed here")
    yield root, d
    d.close()


FREE_KIB = [0, 4, 12, 16, 24, 200, 208, 216]  # the run fails at the lock .. the commit


def test_a_full_disk_during_a_new_train_is_one_line_and_leaves_no_folder(disk):
    root, d = disk
    failed = 0
    for kib in FREE_KIB:
        d.free(kib)
        rc, _, err = run_spark(TRAIN + ["--out", "out/new"] + FAST, cwd=root)
        if rc == 0:  # the disk had room for the whole run
            shutil.rmtree(root / "out/new")
            continue
        failed += 1
        stopped_on_a_write(rc, err, "No space left on device (ENOSPC)")
        assert listing(root / "out") == [], (kib, listing(root / "out"))
    assert failed >= len(FREE_KIB) - 1


def test_a_full_disk_over_an_existing_job_keeps_its_outputs(disk):
    root, d = disk
    rc, _, err = run_spark(TRAIN + ["--out", "out/j"] + FAST, cwd=root)
    assert rc == 0, err
    before = snapshot(root / "out/j")
    for kib in (0, 4, 12):
        d.free(kib)
        rc, _, err = run_spark(TRAIN + ["--out", "out/j", "--lr", "0.05"] + FAST, cwd=root)
        stopped_on_a_write(rc, err, "ENOSPC")
        assert verified(root / "out/j") and not leftovers(root / "out/j")
        assert snapshot(root / "out/j") == before


def test_a_read_only_disk_is_one_line_for_a_new_and_an_existing_job(disk):
    root, d = disk
    rc, _, err = run_spark(TRAIN + ["--out", "out/j"] + FAST, cwd=root)
    assert rc == 0, err
    before = snapshot(root / "out/j")
    d.readonly()
    for out in ("out/j", "out/new"):
        rc, _, err = run_spark(TRAIN + ["--out", out] + FAST, cwd=root)
        stopped_on_a_write(rc, err, "EROFS")
    assert snapshot(root / "out/j") == before and listing(root / "out") == ["j"]


@pytest.mark.parametrize("argv", [
    ["code", "train", "--scale", "tiny"],
    ["apply-step", "--sparkbc", PROGRAM, "--weights", "out/a/weights.safetensors",
     "--dataset", D, *FAST]], ids=["code train", "apply-step"])
@pytest.mark.parametrize("kib", [0, 16])
def test_a_full_disk_in_code_train_and_apply_step_leaves_no_folder(disk, argv, kib):
    root, d = disk
    d.free(kib)
    rc, _, err = run_spark(argv, cwd=root)
    stopped_on_a_write(rc, err, "ENOSPC")
    assert listing(root / "out") == []  # the job folder and the parents made for it


def test_a_full_disk_in_an_in_place_apply_step_keeps_the_job(disk):
    root, d = disk
    rc, _, err = run_spark(TRAIN + ["--out", "out/a"] + FAST, cwd=root)
    assert rc == 0, err
    before = snapshot(root / "out/a")
    d.free(4)
    rc, _, err = run_spark(["apply-step", "--sparkbc", PROGRAM, "--weights",
                            "out/a/weights.safetensors", "--dataset", D, *FAST], cwd=root)
    stopped_on_a_write(rc, err, "ENOSPC")
    assert snapshot(root / "out/a") == before and not leftovers(root / "out/a")


def _stage(root, name):
    p = subprocess.run([sys.executable, "-m", f"stages.{name}"], cwd=root, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return p.returncode, p.stderr


def test_a_full_disk_in_the_step_stage_is_one_line_and_keeps_its_inputs(disk):
    root, d = disk
    for name in ("decode_bc", "tokenizer", "prepare", "train_status"):
        rc, err = _stage(root, name)
        assert rc == 0, (name, err)
    job = root / "out/train/job-dry-001"
    before = snapshot(job)
    for kib in (0, 16, 200):
        d.free(kib)
        rc, err = _stage(root, "step")
        stopped_on_a_write(rc, err, "stage step: error:", "ENOSPC")
        assert snapshot(job) == before and not leftovers(job)


TOOLS = {  # every writing command, its output on the full disk
    "export hf": ["export", "--to", "hf", "OUT/hf", "--weights", "out/j/weights.safetensors"],
    "export gguf": ["export", "--to", "gguf", "OUT/m.gguf", "--weights",
                    "out/j/weights.safetensors"],
    "import": ["import", "hf", "--from", "hf", "--out", "OUT/w.safetensors"],
    "compile": ["compile", "data/programs/train-step.spark", "-o", "OUT/x.sparkbc"],
    "eval": ["eval", "--weights", "out/j/weights.safetensors", "--data",
             "data/eval/tiny_heldout.jsonl", "-o", "OUT/e.json"],
    "plot": ["plot", "--checkpoint", "out/j/checkpoint.json", "-o", "OUT/p.png"],
}  # compare -o writes through the same writer as plot -o; it needs DVC experiments first


@pytest.fixture(scope="module")
def tool_project(tmp_path_factory):
    root = git_project(tmp_path_factory.mktemp("tools"))
    (root / ".dvc").mkdir(exist_ok=True)
    rc, _, err = run_spark(["export", "--to", "hf", "hf", "--weights",
                            "out/j/weights.safetensors"], cwd=root)
    assert rc == 0, err
    d = Disk(root / "full")
    if not os.path.ismount(root / "full"):
        pytest.skip("mount -t tmpfs is not allowed here")
    d.free(0)
    yield root
    d.close()


@pytest.mark.parametrize("name", TOOLS)
def test_every_writing_command_on_a_full_disk_is_one_line(tool_project, name):
    root = tool_project
    argv = [a.replace("OUT", "full") for a in TOOLS[name]]
    rc, _, err = run_spark(argv, cwd=root)
    assert_one_line_error(rc, err, "ENOSPC")
    assert listing(root / "full") == []


# ------------------------------------------------- 1. EACCES, EIO, EDQUOT at every write

def _fail_write(monkeypatch, code, n):
    """The n-th file opened for writing (our writers' os.open, DVCLive's open) fails
    with `code`; returns the count of write opens seen."""
    seen = [0]
    real_os_open, real_open = os.open, builtins.open

    def hit():
        seen[0] += 1
        if seen[0] == n:
            raise OSError(code, os.strerror(code))

    def os_open(path, flags, *a, **kw):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            hit()
        return real_os_open(path, flags, *a, **kw)

    def open_(file, mode="r", *a, **kw):
        if isinstance(file, (str, os.PathLike)) and set(mode) & set("wax+"):
            hit()
        return real_open(file, mode, *a, **kw)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)
    return seen


def _train_in_process(out, *extra):
    from sparktrain.cli import main

    return main(TRAIN + ["--out", out] + FAST + list(extra))


@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO, errno.EDQUOT, errno.ENOSPC],
                         ids=errno.errorcode.get)
def test_every_write_of_a_train_run_failing_is_one_line(project, monkeypatch, capsys, code):
    monkeypatch.chdir(project)
    with monkeypatch.context() as m:
        seen = _fail_write(m, code, 0)
        assert _train_in_process("out/count") == 0
    n_writes = seen[0]
    assert n_writes >= 10
    shutil.copytree(project / "out/count", project / "out/old")
    before = snapshot(project / "out/old")
    capsys.readouterr()
    failed = 0
    for n in range(1, n_writes + 1):
        for out in ("out/new", "out/old"):
            with monkeypatch.context() as m:
                _fail_write(m, code, n)
                rc = _train_in_process(out, "--lr", "0.05")
            err = capsys.readouterr().err
            if rc == 0:  # the n-th write open of this run came after its last
                shutil.rmtree(project / out) if out == "out/new" else None
                continue
            failed += 1
            stopped_on_a_write(rc, err, errno.errorcode[code])
            # perf.json and the curves are in the commit (round six): nothing is written
            # after it, so every failed write leaves the old set (or no folder)
            if out == "out/new":
                assert not (project / out).exists(), (n, err)
            else:
                assert snapshot(project / out) == before, (n, err)
            if (project / out).exists():
                assert not leftovers(project / out), (n, err)
                assert not (project / out / ".live-run").exists()
            if out == "out/new":
                shutil.rmtree(project / out, ignore_errors=True)
    assert failed >= n_writes  # both jobs failed at (about) every write


# ---------------------------------------------------------------- 2, 3. a killed resumable run

RESUMABLE = ["--outer", "3", "--inner", "2", "--checkpoint-every", "1"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An unbroken resumable run: (project, its job folder)."""
    root = train_j(copy_project(tmp_path_factory.mktemp("whole")), RESUMABLE)
    return root, root / "out/j"


def _resume(root):
    return run_spark(TRAIN + ["--out", "out/j"] + RESUMABLE, cwd=root)


def _same_as_whole(job, whole_job):
    for name in ("weights.safetensors", "checkpoint.json", "ARTIFACT"):
        assert (job / name).read_bytes() == (whole_job / name).read_bytes(), name
    assert snapshot(job / "dvclive") == snapshot(whole_job / "dvclive")
    assert not (job / ".live-run").exists() and not list(job.glob("resume.*"))


def _huge(path):
    with open(path, "wb") as f:
        f.truncate(300 << 20)  # sparse: 300 MiB read back as zeros


TAMPERED_SERIES = {
    "garbage": lambda p: p.write_bytes(b"\x00\xff not,a\ttsv\n" * 50),
    "1e400": lambda p: p.write_text("step\tloss\n0\t1e400\n1e400\t5\n"),
    "torn line": lambda p: p.write_text(p.read_text()[:-7]),
    "huge": _huge,
    "a link": lambda p: (p.unlink(), p.symlink_to("/etc/hostname")),
    "metrics.json": lambda p: (p.parents[2] / "metrics.json").write_text("{1e400"),
}


@pytest.mark.parametrize("how", TAMPERED_SERIES)
def test_a_tampered_dvclive_series_is_rebuilt_on_resume(tmp_path, monkeypatch, whole, how):
    root = copy_project(tmp_path / "p")
    job = killed_in_pass_two(root, monkeypatch, RESUMABLE, as_sigkill=True)
    TAMPERED_SERIES[how](job / ".live-run" / SERIES / "loss.tsv")
    rc, _, err = _resume(root)
    assert rc == 0 and "Traceback" not in err, err
    assert "resumed after outer 1" in err
    _same_as_whole(job, whole[1])


TORN_STATES = {
    "tensors cut to 100 bytes": ("resume.safetensors", lambda b: b[:100]),
    "tensors empty": ("resume.safetensors", lambda b: b""),
    "state not JSON": ("resume.json", lambda b: b[:40]),
    "tokens_seen 1e400": ("resume.json", lambda b: _edit(b, tokens_seen=1e400)),
    "done a string": ("resume.json", lambda b: _edit(b, done="1")),
    "done past the run": ("resume.json", lambda b: _edit(b, done=7)),
    "curve loss 1e400": ("resume.json", lambda b: _edit(b, curve=[{"outer": 0, "loss": 1e400,
                                                                   "phase": "start"}] * 2)),
    "curve short": ("resume.json", lambda b: _edit(b, curve=[])),
    "sampler wrong type": ("resume.json", lambda b: _edit(b, sampler=[1, 2])),
    "sampler order foreign": ("resume.json", lambda b: _edit(b, sampler={
        **json.loads(b)["sampler"], "order": [10 ** 9] * 24})),
}


def _edit(data: bytes, **fields) -> bytes:
    doc = json.loads(data)
    doc.update(fields)
    return json.dumps(doc).replace("Infinity", "1e400").encode()


@pytest.mark.parametrize("how", TORN_STATES)
def test_a_torn_resume_state_is_discarded_in_one_line(tmp_path, monkeypatch, whole, how):
    root = copy_project(tmp_path / "p")
    job = killed_in_pass_two(root, monkeypatch, RESUMABLE, as_sigkill=True)
    name, change = TORN_STATES[how]
    (job / name).write_bytes(change((job / name).read_bytes()))
    rc, _, err = _resume(root)
    assert rc == 0 and "Traceback" not in err, err
    said = [ln for ln in err.splitlines() if "saved state" in ln]
    assert len(said) == 1 and "discarding it and starting afresh" in said[0], err
    assert "resumed after" not in err
    _same_as_whole(job, whole[1])


# ---------------------------------------------------------------- 4. knobs before the first write

WORKERS = ["0", "-1", "abc", "1e9", "2.5", "1000000000"]
# params.yaml named: without --params a folder trains with the tiny coder recipe
CORPUS_TRAIN = ["train", "--dataset", "data/corpus/tiny", "--out", "out/c",
                "--params", "params.yaml"] + FAST


def _recipe_with(tmp_path, **step):
    recipe = yaml.safe_load((ROOT / "data/programs/coder-recipes.yaml").read_text())["tiny"]
    recipe["step"].update(step)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("argv", [TRAIN + ["--out", "out/k"] + FAST, CORPUS_TRAIN,
                                  ["code", "train", "--scale", "tiny"]],
                         ids=["train pairs", "train corpus", "code train"])
def test_spark_workers_is_refused_before_a_job_folder_is_made(tmp_path, argv, workers):
    root = copy_project(tmp_path / "p")
    rc, _, err = run_spark(argv, cwd=root, env={"SPARK_WORKERS": workers})
    assert_one_line_error(rc, err, "SPARK_WORKERS")
    assert not (root / "out").exists()


def test_bad_knobs_leave_an_existing_job_unchanged(trained):
    root, weights = trained
    before = snapshot(weights.parent)
    for env, extra in [({"SPARK_WORKERS": w}, []) for w in WORKERS] + [
            ({}, ["--schedule", "cosine", "--warmup", "100"])]:
        rc, _, err = run_spark(TRAIN + ["--out", "out/j"] + FAST + extra, cwd=root, env=env)
        assert_one_line_error(rc, err)
        assert snapshot(weights.parent) == before


@pytest.mark.parametrize("argv", [TRAIN + ["--out", "out/k"], CORPUS_TRAIN],
                         ids=["train pairs", "train corpus"])
@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_a_warm_up_longer_than_the_run_is_refused_before_a_write(tmp_path, argv, schedule):
    root = copy_project(tmp_path / "p")
    rc, _, err = run_spark(argv + FAST + ["--schedule", schedule, "--warmup", "100"], cwd=root)
    assert_one_line_error(rc, err, "warmup")
    assert not (root / "out").exists()


def test_code_train_refuses_a_warm_up_longer_than_the_run_before_a_write(tmp_path):
    root = copy_project(tmp_path / "p")
    rc, _, err = run_spark(["code", "train", "--params",
                            _recipe_with(tmp_path, warmup=10 ** 6)], cwd=root)
    assert_one_line_error(rc, err, "warmup")
    assert not (root / "out").exists()


# ---------------------------------------------------------------- 5. a stale .live-run

def _apply_step(root, weights, env=None):
    return run_spark(["apply-step", "--sparkbc", PROGRAM, "--weights", weights, "--dataset", D,
                      *FAST], cwd=root, env=env)


STALE = {
    "killed run's folder": lambda p, out: None,
    "folder with junk": lambda p, out: (p / SERIES / "junk.tsv").write_text("step\tjunk\n"),
    "a file": lambda p, out: (shutil.rmtree(p), p.write_text("stale\n")),
    "a link out": lambda p, out: (shutil.rmtree(p), p.symlink_to(out)),
}


@pytest.mark.parametrize("stale", STALE)
def test_a_killed_in_place_apply_step_leaves_nothing_stale_after_the_next_run(
        trained, tmp_path, stale):
    root, weights = trained
    folder = root / "out" / f"kill-{len(os.listdir(root / 'out'))}"
    shutil.copytree(weights.parent, folder)
    w = folder / "weights.safetensors"
    rc, _, _ = _apply_step(root, w, env={outputs.CRASH_HOOK: "before-journal"})
    # its curves were already moved to the journal's pending name (round six: they are in
    # the commit); a run killed mid-training leaves them in .live-run: both go stale
    assert rc == -9 and (folder / ".dvclive.pending" / "plots/metrics").is_dir()
    shutil.copytree(folder / ".dvclive.pending", folder / ".live-run" / "dvclive")
    outside = tmp_path / "outside"
    outside.mkdir()
    STALE[stale](folder / ".live-run", outside)
    rc, _, err = _apply_step(root, w)
    assert rc == 0, err
    assert not os.path.lexists(folder / ".live-run") and not leftovers(folder)
    assert sorted(os.listdir(folder / SERIES)) == sorted(f"{n}.tsv" for n in
                                                       ("heldout_bpb_64window_estimate",
                                                        "heldout_loss", "loss", "lr"))
    assert os.listdir(outside) == [] and verified(folder)


# ---------------------------------------------------------------- 6. .live-run swapped for a link

SWAPS = [".live-run", ".live-run/dvclive", f".live-run/{SERIES}",
         ".live-run/dvclive/metrics.json", f".live-run/{SERIES}/loss.tsv"]


@pytest.mark.parametrize("where", SWAPS)
def test_a_live_folder_swapped_for_a_link_mid_run_redirects_no_byte(
        project, tmp_path, monkeypatch, capsys, where):
    """After the first pass's rows, `where` is moved outside and a link to it put in
    its place; the next write DVCLive would make is refused."""
    monkeypatch.chdir(project)
    job = project / "out" / f"swap{SWAPS.index(where)}"
    decoy = tmp_path / "decoy"
    real, taken = live.Watcher.micro_step, {}

    def swap(self, k, rate):
        if not taken:
            src = job / where
            shutil.move(src, decoy)
            src.symlink_to(decoy)
            taken["before"] = snapshot(decoy) if decoy.is_dir() else decoy.read_bytes()
        return real(self, k, rate)

    monkeypatch.setattr(live.Watcher, "micro_step", swap)
    from sparktrain.cli import main

    rc = main(TRAIN + ["--out", os.fspath(job.relative_to(project)), "--outer", "2",
                       "--inner", "1"])
    err = capsys.readouterr().err
    stopped_on_a_write(rc, err, "symbolic link")
    after = snapshot(decoy) if decoy.is_dir() else decoy.read_bytes()
    assert after == taken["before"]
    assert not job.exists()  # a new job: removed whole, the link with it


def test_a_live_run_swapped_for_a_link_before_the_move_in_is_refused(
        trained, tmp_path, monkeypatch, capsys):
    root, weights = trained
    monkeypatch.chdir(root)
    job = root / "out/swap-publish"
    shutil.copytree(weights.parent, job)
    decoy, taken = tmp_path / "decoy", {}
    real = JobFolder.live_pending  # what the commit moves in (round six: the curves are in it)

    def swap(folder):
        shutil.move(job / ".live-run", decoy)
        (job / ".live-run").symlink_to(decoy)
        taken["before"] = snapshot(decoy)
        return real(folder)

    monkeypatch.setattr(JobFolder, "live_pending", swap)
    from sparktrain.cli import main

    rc = main(TRAIN + ["--out", "out/swap-publish"] + FAST)
    err = capsys.readouterr().err
    stopped_on_a_write(rc, err, "symbolic link")
    assert verified(job) and snapshot(job / "dvclive") == snapshot(weights.parent / "dvclive")
    assert snapshot(decoy) == taken["before"]
