"""The progress helper and the per-pass logger (sparktrain/progress.py,
sparktrain/train/live.py): plain lines off a terminal, an ETA from this process's
work only, DVCLive's files in the job folder."""
import csv
import io
import json

from sparktrain.progress import Progress, eta_seconds, format_seconds
from sparktrain.jobfiles import LIVE_DIR
from sparktrain.train.live import METRICS, PassLogger, series_path


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_eta_counts_only_this_processs_work():
    # 6 of 10 passes were done before the resume; 2 more took 20 s here: 2 left at 10 s
    assert eta_seconds(6, 8, 10, 20.0) == 20.0
    assert eta_seconds(6, 6, 10, 5.0) is None          # nothing done here yet
    assert eta_seconds(0, 3, None, 5.0) is None        # no total, no ETA
    assert format_seconds(40) == "40s" and format_seconds(125) == "2m05s"
    assert format_seconds(3720) == "1h02m" and format_seconds(None) == "-"


def test_plain_lines_off_a_terminal_and_the_eta_after_a_resume():
    out, clock = io.StringIO(), Clock()
    p = Progress("step", total=10, done=6, unit="passes", stream=out, clock=clock)
    assert not p.tty     # a StringIO is no terminal
    clock.now += 30
    p.advance(note="loss 1.0")
    clock.now += 30
    p.advance()
    p.log("a line of its own")
    p.close()
    assert out.getvalue().splitlines() == [
        "step: 7/10 passes, 30s elapsed, ETA 1m30s, loss 1.0",
        "step: 8/10 passes, 1m00s elapsed, ETA 1m00s",
        "a line of its own"]


def test_a_terminal_gets_a_rich_bar_not_lines():
    out = io.StringIO()
    with Progress("points", total=3, stream=out, tty=True) as p:
        p.advance(note="1 failed")
        p.log("point 1 done")
    text = out.getvalue()
    assert "point 1 done" in text and "1/3" in text and "\x1b[" in text   # drawn, with ANSI
    assert "points: 1/3" not in text


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f, delimiter="\t"))


def test_pass_logger_writes_dvclive_series_and_a_line_per_pass(tmp_path):
    out = io.StringIO()
    with PassLogger(tmp_path, total=3, stream=out) as log:
        for outer in range(3):
            log.log_pass({"outer": outer, "loss": 2.0 - outer / 2, "heldout_loss": 2.5 - outer / 4,
                          "lr": 0.05, "tokens_per_s": 1000.0 + outer})
    assert _rows(series_path(tmp_path, "loss")) == [["step", "loss"], ["0", "2.0"],
                                                     ["1", "1.5"], ["2", "1.0"]]
    assert [r[1] for r in _rows(series_path(tmp_path, "heldout_loss"))[1:]] == ["2.5", "2.25", "2.0"]
    # never given: the file dvc.yaml declares is there, its header only
    assert series_path(tmp_path, "heldout_bpb").read_text() == "step\theldout_bpb\n"
    assert not series_path(tmp_path, "tokens_per_s").exists()    # varies run to run: no series
    summary = json.loads((tmp_path / LIVE_DIR / "metrics.json").read_text())
    assert summary["loss"] == 1.0 and summary["step"] == 2
    assert not (tmp_path / "dvc.yaml").exists() and not (tmp_path / LIVE_DIR / "dvc.yaml").exists()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("step: 1/3 passes")
    assert "held-out 2.5000" in lines[0] and "1,000 tok/s" in lines[0]


def test_the_same_passes_write_the_same_deterministic_bytes(tmp_path):
    def run(folder):
        with PassLogger(folder, total=2, stream=io.StringIO()) as log:
            for outer in range(2):
                log.log_pass({"outer": outer, "loss": 1.0 / (outer + 1), "lr": 0.1,
                              "tokens_per_s": 123.0 * (outer + 1)})
        return {n: series_path(folder, n).read_bytes() for n in METRICS
                if series_path(folder, n).exists()}
    assert run(tmp_path / "a") == run(tmp_path / "b") != {}


def test_a_resume_keeps_earlier_passes_drops_a_half_logged_one_and_its_eta_is_local(tmp_path):
    with PassLogger(tmp_path, total=4, stream=io.StringIO()) as log:
        for outer in range(3):              # pass 2 was logged, then the run died
            log.log_pass({"outer": outer, "loss": 3.0 - outer})
    out, clock = io.StringIO(), Clock()
    with PassLogger(tmp_path, total=4, start_outer=2, stream=out, clock=clock) as log:
        clock.now += 10
        log.log_pass({"outer": 2, "loss": 0.9})
        clock.now += 10
        log.log_pass({"outer": 3, "loss": 0.8})
    assert _rows(series_path(tmp_path, "loss"))[1:] == [["0", "3.0"], ["1", "2.0"],
                                                         ["2", "0.9"], ["3", "0.8"]]
    lines = out.getvalue().splitlines()
    # 1 pass in 10 s here, 1 left: ETA 10 s (not 3 passes' worth of rate)
    assert lines[0].startswith("step: 3/4 passes, 10s elapsed, ETA 10s")
