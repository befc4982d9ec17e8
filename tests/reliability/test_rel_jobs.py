"""Job folders: one writer at a time, readers change nothing, recovery stays inside."""
from __future__ import annotations

import json
import subprocess

import pytest

from relkit import FAST, TRAIN, snapshot, trained  # noqa: F401  (fixture)
from sparkhelp import PROMPT_GUARD_S, SPARK, assert_one_line_error, run_spark
from sparktrain.core.fsutil import sha256_file
from sparktrain.train.folder import JobFolder


def test_second_writer_gets_one_line_and_changes_nothing(trained):
    project, _ = trained
    folder = project / "out/j"
    good = snapshot(folder)
    with JobFolder(folder):           # this process is the writer now
        rc, _, err = run_spark(TRAIN + ["--out", "out/j", "--seed", "3"] + FAST, cwd=project)
    assert_one_line_error(rc, err, "in use by another spark process")
    assert snapshot(folder) == good


def test_status_on_a_folder_that_is_not_a_job_changes_nothing(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / ".notes.pending").write_text("keep me")
    (folder / ".weights.safetensors.pending").write_text("not yours either")
    (folder / "data.txt").write_text("x")
    before = snapshot(folder)
    rc, out, err = run_spark(["status", folder], cwd=tmp_path)
    assert rc == 0, err
    assert json.loads(out)["state"] == "absent"
    assert snapshot(folder) == before and not (folder / ".lock").exists()


@pytest.mark.parametrize("journal", ['["/abs/p"]', '["../../escape"]', "5", '{"a": 1}',
                                     "[" * 100000, '["ARTIFACT"'])
def test_crafted_journal_is_never_followed(tmp_path, journal):
    outside = tmp_path / "abs"
    outside.mkdir()
    folder = tmp_path / "out/j"
    folder.mkdir(parents=True)
    (folder / ".commit").write_text(journal)
    (folder / ".p.pending").write_text("payload")
    (folder / "..pending").write_text("payload")
    before = snapshot(tmp_path)
    rc, out, err = run_spark(["status", "out/j"], cwd=tmp_path)
    assert rc == 0 and "Traceback" not in err
    assert snapshot(tmp_path) == before            # a reader changes nothing
    with JobFolder(folder) as job:                 # the lock holder: only the three names
        job.recover()
    after = snapshot(tmp_path)
    assert after.pop("out/j/.lock") == b""
    before.pop("out/j/.commit")
    assert after == before


def test_recover_rolls_only_the_job_files_forward(tmp_path):
    folder = tmp_path / "j"
    folder.mkdir()
    (folder / ".ARTIFACT.pending").write_text("new artifact")
    (folder / ".evil.pending").write_text("x")
    (folder / ".commit").write_text('["ARTIFACT", "evil", "/tmp/x"]')
    with JobFolder(folder) as job:
        job.recover()
    assert (folder / "ARTIFACT").read_text() == "new artifact"
    assert (folder / ".evil.pending").exists() and not (folder / "evil").exists()
    assert not (folder / ".commit").exists()


def test_status_does_not_show_metrics_for_weights_that_are_gone(trained, tmp_path):
    """A failed `dvc repro` step removes weights.safetensors but leaves eval.json."""
    project, weights = trained
    folder = project / "out/j"
    ckpt = json.loads((folder / "checkpoint.json").read_text())
    (folder / "eval.json").write_text(json.dumps({"loss": 1.5, "perplexity": 4.48,
                                                  "weights_sha256": ckpt["weights_sha256"]}))
    rc, out, _ = run_spark(["status", "out/j"], cwd=project)
    assert rc == 0 and json.loads(out)["eval"]["loss"] == 1.5    # verified weights: shown
    saved = weights.read_bytes()
    weights.unlink()
    try:
        rc, out, _ = run_spark(["status", "out/j"], cwd=project)
        state = json.loads(out)
        assert state["state"] == "failed" and not state["weights_verified"]
        assert "eval" not in state and "eval_stale" in state
        rc, out, _ = run_spark(["status", "out/j", "--summary"], cwd=project)
        assert "held-out" not in out and "failed" in out
    finally:
        weights.write_bytes(saved)
        (folder / "eval.json").unlink()


def test_a_fifo_in_a_job_folder_never_hangs_status(trained):
    project, _ = trained
    fifo = project / "out/j/perf.json"
    saved = fifo.read_bytes()
    fifo.unlink()
    import os
    os.mkfifo(fifo)
    try:
        rc, out, err = run_spark(["status", "out/j"], cwd=project, timeout=PROMPT_GUARD_S)
        assert rc == 0 and json.loads(out)["state"] == "trained"
    finally:
        fifo.unlink()
        fifo.write_bytes(saved)


def _consistent(folder) -> bool:
    ckpt = json.loads((folder / "checkpoint.json").read_text())
    return sha256_file(folder / "weights.safetensors") == ckpt["weights_sha256"]


# Rounds of the race below: each is two trainings and a poll loop (5-10 s on 2 cores);
# the claims hold for any timing, so more rounds only retry the same race.
WRITER_ROUNDS = 6


@pytest.mark.slow
def test_two_writers_and_a_polling_reader(trained):
    """Each round: two trainers start together on one job while a reader polls
    `spark status`. Whatever the timing, each writer either trains (exit 0) or
    is refused with one line (exit 2); at least one trains; no reader or writer
    crashes; and the set on disk always agrees with itself."""
    project, _ = trained
    folder = project / "out/j"
    refused = 0
    for round_ in range(WRITER_ROUNDS):
        writers = [subprocess.Popen(SPARK + TRAIN + ["--out", "out/j", "--seed", str(round_ + k),
                                                     "--outer", "6", "--inner", "4"],
                                    cwd=project, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True) for k in (0, 1)]
        polls = 0
        while any(w.poll() is None for w in writers) or polls == 0:
            p = subprocess.run(SPARK + ["status", "out/j"], cwd=project, capture_output=True,
                               text=True, timeout=PROMPT_GUARD_S)
            assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
            # a folder a writer holds reads "running"; otherwise the last good run
            assert json.loads(p.stdout)["state"] in ("trained", "running")
            polls += 1
        results = [(w.wait(), w.stderr.read()) for w in writers]
        assert {rc for rc, _ in results} <= {0, 2} and 0 in {rc for rc, _ in results}, results
        for rc, err in results:
            assert "Traceback" not in err
            if rc == 2:
                refused += 1
                lines = [ln for ln in err.splitlines() if ln.strip()]
                assert len(lines) == 1 and "in use by another spark process" in lines[0]
        assert _consistent(folder)
        assert not list(folder.glob(".*.pending")) and not (folder / ".commit").exists()
    print(f"two writers x {WRITER_ROUNDS} rounds: {refused} refused")
