"""The training loop's progress (docs/training.md "Progress"): a rich bar over the
micro-steps when its lines would go to a terminal, exactly today's plain lines
anywhere else, and an ETA that after a resume counts only this process's work."""
from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys

import pytest

import sparktrain.train.live as live
import sparktrain.train.loop as loop
from sparktrain.train.runner import run_job
from sparkhelp import HANG_GUARD_S, ROOT, SPARK
from sparktrain.data.source import source_for
from sparktrain.model.config import SCALES
from sparktrain.params import Defaults, StepConfig
from sparktrain.core.progress import Progress
from sparktrain.train.job import adhoc_job
from sparktrain.train.live import StderrLines

STEP = StepConfig(outer=2, inner=3, batch_size=4, lr=0.05)
HELDOUT = str(ROOT / "data/eval/tiny_heldout.jsonl")
PASS_LINE = re.compile(r"^\[[^\]]+\] outer (\d+)/2  loss \d+\.\d{4}  held-out \d+\.\d{4}  "
                       r"[\d,]+ tok/s  \d+\.\ds, ~\d+s left$")


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self):
        self.now = 50.0

    def __call__(self):
        return self.now


def _run(tmp_path, name="job", step=STEP, **kw):
    job = adhoc_job(str(ROOT / "data/train/dataset.jsonl"), str(tmp_path / name), None)
    return run_job(job, step, SCALES["tiny"],
                                 source_for(job.dataset, Defaults(), HELDOUT), **kw)


def test_on_a_terminal_the_loop_draws_a_bar_over_its_micro_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")                    # room for the whole note
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    bars = []
    monkeypatch.setattr(live, "Progress", lambda *a, **k: bars.append(Progress(*a, **k))
                        or bars[-1])
    barred = _run(tmp_path, "a/job")
    text = term.getvalue()
    assert "\x1b[" in text                                  # drawn by rich, with ANSI codes
    assert "outer 2/2" in text and "6/6" in text and "micro-steps" in text
    assert "0:00:" in text and "ETA" in text                # elapsed time and the ETA column
    last = text.rsplit("\r", 1)[-1]                         # the bar as it was left
    assert "[job] outer 2/2" in last and "6/6" in last and "ETA 0s" in last
    assert "held-out" in last and "tok/s" in last           # the note: the curve and the rate
    (bar,) = bars
    assert (bar.done_at_start, bar.done, bar.total) == (0, 6, 6)   # advanced every micro-step
    # the per-pass lines still come, above the bar; the bytes are those of a plain run
    assert "] outer 1/2  loss" in text
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    plain = _run(tmp_path, "b/job")
    assert barred.weights_sha256 == plain.weights_sha256


def test_off_a_terminal_exactly_one_plain_line_per_pass(tmp_path, monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    _run(tmp_path)
    lines = err.getvalue().splitlines()
    assert "\x1b" not in err.getvalue()
    assert lines[0].startswith("[job] start  loss ") and "2x3 micro-steps of 4" in lines[0]
    assert [PASS_LINE.match(ln).group(1) for ln in lines[1:]] == ["1", "2"], lines


def test_a_callers_own_progress_gets_lines_even_on_a_terminal(tmp_path, monkeypatch):
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    got = []
    _run(tmp_path, progress=got.append)
    assert term.getvalue() == ""
    assert len(got) == 3 and all(PASS_LINE.match(ln) for ln in got[1:])


def _bar_of(tmp_path, progress):
    """The watcher's bar (None: lines only) once its run has started."""
    with live.Watcher("job", tmp_path, outer=2, inner=3, progress=progress) as watch:
        watch.start({"outer": 0, "loss": 5.0}, 0.1, 0, "a test")
        return watch.bar


def test_the_bar_is_for_writers_to_a_terminal_stderr_only(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    assert _bar_of(tmp_path, None) is not None                       # the default: stderr
    assert _bar_of(tmp_path, StderrLines("spark train: ...")) is not None   # the CLI's writer
    got = []
    assert _bar_of(tmp_path, got.append) is None and len(got) == 1   # a caller's own: lines
    assert _bar_of(tmp_path, lambda line: None) is None
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert _bar_of(tmp_path, None) is None


def test_the_bars_eta_after_a_resume_counts_this_processs_micro_steps_only():
    # a run of 5 passes x 4 micro-steps resumed after pass 3: 12 of 20 done before
    clock = Clock()
    bar = Progress("outer 4/5", total=20, done=12, unit="micro-steps", stream=FakeTerminal(),
                   tty=True, clock=clock)
    assert bar.eta is None                       # nothing done here yet: no ETA
    for _ in range(4):                           # pass 4 here took 8 s: 2 s a micro-step
        clock.now += 2
        bar.advance()
    bar.close()
    assert bar.eta == pytest.approx(8.0)         # 4 left at 2 s, not 16 done in 8 s
    assert bar.done == 16


def test_a_resumed_run_starts_its_bar_at_the_passes_behind_it(tmp_path, monkeypatch):
    step = StepConfig(outer=3, inner=2, batch_size=4, lr=0.05, checkpoint_every=1)
    real_point = loop._point

    def dies_at_3(run, outer, phase):
        if outer == 3:
            raise KeyboardInterrupt("killed")
        return real_point(run, outer, phase)
    monkeypatch.setattr(loop, "_point", dies_at_3)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, step=step)
    monkeypatch.setattr(loop, "_point", real_point)
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    bars = []
    monkeypatch.setattr(live, "Progress", lambda *a, **k: bars.append(Progress(*a, **k))
                        or bars[-1])
    _run(tmp_path, step=step)
    (bar,) = bars
    assert (bar.done_at_start, bar.done, bar.total) == (4, 6, 6)   # 2 passes x 2 behind it
    assert "resumed after outer 2" in term.getvalue() and "6/6" in term.getvalue()
    # every pass has its DVCLive row once, the resumed one too
    rows = (tmp_path / "job/dvclive/plots/metrics/loss.tsv").read_text().split()
    assert rows[2::2] == ["0", "1", "2", "3"]


def _on_a_pty(args, cwd) -> tuple[int, str]:
    """Run `args` with stdout and stderr on a pseudo-terminal, as a person would."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen([str(a) for a in args], cwd=cwd, env=env, stdout=slave,
                            stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:          # the other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=HANG_GUARD_S), b"".join(chunks).decode("utf-8", "replace")


def test_spark_train_on_a_real_terminal_draws_the_bar(tmp_path):
    """The CLI's writer (StderrLines, from cli/train.py run_and_record): its first line,
    then the bar."""
    rc, text = _on_a_pty(SPARK + ["train", "--dataset", ROOT / "data/train/dataset.jsonl",
                                  "--out", tmp_path / "o", "--outer", "2", "--inner", "3",
                                  "--heldout", HELDOUT], tmp_path)
    assert rc == 0, text
    assert text.startswith("spark train: knobs from the defaults and flags")
    assert "\x1b[" in text and "6/6" in text and "micro-steps" in text and "ETA" in text
    assert "[o] outer 2/2" in text


def test_the_scale_proof_on_a_terminal_draws_the_bar(project):
    """tools/proof.py calls run_job with the default progress: the bar on a terminal."""
    rc, text = _on_a_pty([sys.executable, ROOT / "tools/proof.py", "scale", "--scale", "tiny",
                          "--outer", "1", "--inner", "2"], project)
    assert rc == 0, text
    assert "\x1b[" in text and "2/2" in text and "micro-steps" in text
    assert "outer 1/1" in text and "spark-sgd-proof-scale" in text
