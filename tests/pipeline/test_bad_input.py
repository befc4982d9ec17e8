"""Bad input through the real pipeline: `dvc repro` fails, the failing stage
says what is wrong in one stderr line without a traceback, nothing trains."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from .conftest import VENV_BIN, clone, dvc, run, tool_env

pytestmark = pytest.mark.e2e

# (id, params.yaml line, its replacement, what the stage's error line must name)
BAD_PARAMS = [
    ("typo-key", "  outer: 4", "  oter: 4", "step.oter"),
    ("wrong-type", "  lr: 0.03", '  lr: "fast"', "step.lr"),
    ("job-not-in-program", "job: job-dry-001", "job: job-nope-002", "job-nope-002"),
    ("job-with-slash", "job: job-dry-001", "job: team/job-dry-001", "team/job-dry-001"),
    ("job-dotdot", "job: job-dry-001", "job: ../job-dry-001", "../job-dry-001"),
]


@pytest.mark.parametrize("line, replacement, named", [case[1:] for case in BAD_PARAMS],
                         ids=[case[0] for case in BAD_PARAMS])
def test_bad_params_fail_in_one_line_before_training(template_copy, line, replacement, named):
    params = template_copy / "params.yaml"
    text = params.read_text()
    assert len(re.findall(rf"^{re.escape(line)}\b", text, flags=re.M)) == 1, line
    params.write_text(re.sub(rf"^{re.escape(line)}\b", replacement, text, flags=re.M))

    done = dvc(template_copy, "repro", check=False)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stdout
    stage_lines = [ln for ln in done.stdout.splitlines() if re.match(r"stage \S+: ", ln)]
    errors = [ln for ln in stage_lines if ": error: " in ln]
    assert len(errors) == 1 and errors == stage_lines[-1:], done.stdout
    assert named in errors[0], errors[0]
    assert "exited with 2" in done.stdout, "a user mistake exits 2"
    assert not list(template_copy.glob("**/weights.safetensors")), "no training may run"
    assert not list(template_copy.glob("**/ARTIFACT"))


def test_make_run_names_a_misspelled_job_key_in_the_projects_line(template_copy):
    """DVC parses dvc.yaml before any stage runs, so without `job:` plain `dvc repro`
    says "Could not find 'job'"; make run checks params.yaml first."""
    params = template_copy / "params.yaml"
    params.write_text(re.sub(r"^job:", "jbo:", params.read_text(), count=1, flags=re.M))
    plain = dvc(template_copy, "repro", check=False)
    assert "Could not find 'job'" in plain.stdout, plain.stdout
    done = run(template_copy, "make", "--no-print-directory", "run", "STAMP=", "PLOTS_PAGE=",
               f"BIN={VENV_BIN}")  # under `make test`, a sub-make would name its folder
    assert done.returncode != 0
    # make's own closing line ("make[1]: ***" when `make test` runs this)
    said = [ln for ln in done.stdout.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", ln)]
    assert said == ["stage check-params: error: params: missing key job"], done.stdout
    assert not (template_copy / "out").exists()


def test_a_job_id_climbing_out_is_refused_by_every_stage(repro_copy):
    """`dvc repro -s eval` alone (decode-bc, which used to be the only check, skipped)."""
    params = repro_copy / "params.yaml"
    params.write_text(params.read_text().replace("job: job-dry-001", "job: ../../../evil"))
    before = {p for p in repro_copy.parent.rglob("*") if p.is_file()}
    done = dvc(repro_copy, "repro", "-s", "eval", check=False)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stdout
    written = {p for p in repro_copy.parent.rglob("*") if p.is_file()} - before
    outside = [p for p in written if repro_copy not in p.parents]
    assert outside == [], f"written outside the project: {outside}"
    assert not [p for p in written if p.name in ("eval.json", "loss.png")]
    # DVC may refuse the templated paths first; each stage refuses the id by itself too
    for stage in ("check_params", "decode_bc", "train_status", "step", "eval"):
        alone = run(repro_copy, "python", "-m", f"stages.{stage}")
        assert alone.returncode == 2, alone.stdout
        assert alone.stdout.count("\n") == 1 and "../../../evil" in alone.stdout, alone.stdout
    written = {p for p in repro_copy.parent.rglob("*") if p.is_file()} - before
    assert [p for p in written if repro_copy not in p.parents] == []


def test_a_failed_step_keeps_the_previous_outputs(repro_copy):
    """DVC deletes a stage's outputs before it runs it; a failed step puts the
    last good ones back (from the DVC cache) and `spark status` stays true."""
    folder = repro_copy / "out" / "train" / "job-dry-001"
    names = ("weights.safetensors", "checkpoint.json", "ARTIFACT", "eval.json", "eval_detail.json",
             "loss.png")
    before = {n: (folder / n).read_bytes() for n in names}
    params = repro_copy / "params.yaml"
    params.write_text(params.read_text().replace("  lr: 0.03", "  lr: 1.0e-30"))
    done = dvc(repro_copy, "repro", check=False)
    assert done.returncode != 0 and "exited with 1" in done.stdout, done.stdout
    assert "training failed" in done.stdout and "restored from the DVC cache" in done.stdout
    assert {n: (folder / n).read_bytes() for n in names} == before
    status = run(repro_copy, "spark", "status", "job-dry-001")
    state = json.loads(status.stdout)
    assert state["state"] == "failed" and state["weights_verified"] is True
    assert "failure" in state and state["eval"]
    assert state["failure_current"] is True and state["failure"]["when"]

    # params.yaml reverted: nothing to re-run, and the verified model is the state,
    # with the last failure (when, which knobs) beside it; from a subfolder too
    params.write_text(params.read_text().replace("  lr: 1.0e-30", "  lr: 0.03"))
    assert "Running stage 'step'" not in dvc(repro_copy, "repro").stdout
    sub = repro_copy / "data"
    state = json.loads(run(sub, "spark", "status").stdout)
    assert state["state"] == "trained" and state["failure_current"] is False
    assert state["failure"]["lr"] == 1e-30 and state["failure"]["step"]["lr"] == 1e-30
    summary = run(sub, "spark", "status", "--summary").stdout
    assert summary.startswith("job job-dry-001: trained\n"), summary
    assert f"last run failed at {state['failure']['when']} (lr 1e-30, outer" in summary
    assert "params.yaml differs now" in summary


EVAL_FILES = ("eval.json", "eval_detail.json", "loss.png")


def _rwlock_room(repo, *args: str) -> int:
    """Bytes (whole pages) of .dvc/tmp/rwlock while `dvc *args` holds the lock of the stage
    with the most files: DVC writes every dep and out there (outs twice, read and
    written), by absolute path, each with its pid and command line ("<dvc's path> repro
    eval"). It grows with the path of the
    checkout and of the venv, so a fixed disk size that fits it on one machine does not
    on another (CI's checkout path is longer: DVC stopped in its own words, the lock half
    written, before our stage ran)."""
    import shutil

    from dvc.repo import Repo

    cmd = " ".join([shutil.which("dvc", path=tool_env(repo)["PATH"]) or "dvc", *args])
    info = {"pid": 4_194_304, "cmd": cmd}            # the largest pid Linux gives
    need = 0
    with Repo(str(repo)) as dvc_repo:
        for stage in dvc_repo.index.stages:             # repro reads deps and outs, writes outs
            read: dict = {}
            for item in [*stage.deps, *stage.outs]:
                read.setdefault(item.fs_path, []).append(info)
            write = {item.fs_path: info for item in stage.outs}
            need = max(need, len(json.dumps({"read": read, "write": write})))
    return -(-need // 4096) * 4096


@pytest.fixture
def small_disk(fresh_repro, tmp_path):
    """A copy of the fresh repro on its own tmpfs (skipped where mount is not allowed);
    `left(kib)` shrinks the disk to about `kib` KiB free beyond the room DVC's own
    read-write lock takes (`_rwlock_room`)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("mount -t tmpfs is not allowed here")
    try:
        repo = clone(fresh_repro[0], disk / "repo")

        def left(kib):
            st = os.statvfs(disk)
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
            size = used + kib * 1024 + _rwlock_room(repo, "repro", "eval")
            subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)],
                           check=True, capture_output=True)
        yield repo, left
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# with the stage writing regardless, DVC failed after it: with little room copying the
# files into its cache, at 16 KiB testing its link types ("No possible cache link types"),
# its .tmp files left in .dvc/cache and in the job folder. Each size is room beyond DVC's
# own read-write lock (without it DVC stops in its own words before our stage runs)
@pytest.mark.parametrize("kib", [12, 16, 24])
def test_a_full_disk_in_eval_is_one_line_and_keeps_the_outputs(small_disk, kib):
    """Too little room for the eval files and DVC's cache copies of them: the stage
    refuses before writing, in the project's words, and puts back what DVC removed; no
    temp file (ours or DVC's) stays, dvc.lock is unchanged."""
    repo, left = small_disk
    folder = repo / "out" / "train" / "job-dry-001"
    before = {n: (folder / n).read_bytes() for n in EVAL_FILES}
    lock = (repo / "dvc.lock").read_bytes()
    params = repo / "params.yaml"
    params.write_text(params.read_text().replace("  n_samples: 3 ", "  n_samples: 1 "))
    left(kib)
    done = dvc(repo, "repro", "eval", check=False)
    assert done.returncode != 0 and "exited with 2" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout and "cache link types" not in done.stdout
    errors = [ln for ln in done.stdout.splitlines() if ln.startswith("stage eval: error: ")]
    assert len(errors) == 1 and "not enough space" in errors[0], done.stdout
    assert "restored from the DVC cache" in errors[0], errors[0]
    assert {n: (folder / n).read_bytes() for n in EVAL_FILES} == before
    assert (repo / "dvc.lock").read_bytes() == lock
    temps = [p for p in repo.rglob("*.tmp") if ".git" not in p.relative_to(repo).parts]
    assert temps == [], temps
