"""The progress helper and the per-pass logger (sparktrain/core/progress.py,
sparktrain/train/live.py): plain lines off a terminal, an ETA from this process's
work only, DVCLive's files in the job folder."""
import csv
import io
import json

from sparktrain.core.progress import Progress, eta_seconds, format_seconds
from sparktrain.core.jobfiles import LIVE_DIR
from sparktrain.train.live import METRICS, Watcher, series_path
from sparktrain.train.folder import JobFolder


def publish(folder):
    """The run's curves committed as the job's dvclive/ (what the step's commit does)."""
    with JobFolder(folder) as job:
        job.commit({}, job.live_pending())


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


def _watch(folder, points, done=0, outer=3, lines=None, earlier=()):
    """A watcher fed `points` (the first is the start, or the resumed pass; `earlier`
    the resumed state's passes before it), then published."""
    lines = [] if lines is None else lines
    with Watcher("job", folder, outer=outer, inner=2, progress=lines.append) as watch:
        watch.start(points[0], 0.05, done, "a test", [(p, 0.05) for p in earlier])
        for point in points[1:]:
            watch.micro_step(point["outer"], 1000.0)
            watch.pass_done(point, 0.05, 1000.0)
    return lines


def test_the_watcher_writes_dvclive_series_and_a_line_per_pass(tmp_path):
    lines = _watch(tmp_path, [{"outer": k, "loss": 2.0 - k / 2, "heldout_loss": 2.5 - k / 4}
                              for k in range(3)], outer=2)
    assert not (tmp_path / LIVE_DIR).exists()        # pending until the run's commit
    publish(tmp_path)
    assert _rows(series_path(tmp_path, "loss")) == [["step", "loss"], ["0", "2.0"],
                                                     ["1", "1.5"], ["2", "1.0"]]
    assert [r[1] for r in _rows(series_path(tmp_path, "heldout_loss"))[1:]] == ["2.5", "2.25", "2.0"]
    assert [r[1] for r in _rows(series_path(tmp_path, "lr"))[1:]] == ["0.05"] * 3
    # never given: the file dvc.yaml declares is there, its header only
    assert series_path(tmp_path, "heldout_bpb_64window_estimate").read_text() == \
        "step\theldout_bpb_64window_estimate\n"
    assert not series_path(tmp_path, "tokens_per_s").exists()    # varies: lines only
    summary = json.loads((tmp_path / LIVE_DIR / "metrics.json").read_text())
    assert summary["loss"] == 1.0 and summary["step"] == 2
    assert not (tmp_path / "dvc.yaml").exists() and not (tmp_path / LIVE_DIR / "dvc.yaml").exists()
    assert lines[0] == "[job] start  loss 2.0000  held-out 2.5000  a test"
    assert len(lines) == 3 and lines[1].startswith("[job] outer 1/2  loss 1.5000  held-out 2.2500")
    assert "1,000 tok/s" in lines[1] and lines[2].endswith("~0s left")


def test_the_same_passes_write_the_same_bytes(tmp_path):
    def run(folder):
        _watch(folder, [{"outer": k, "loss": 1.0 / (k + 1)} for k in range(2)])
        publish(folder)
        return {n: series_path(folder, n).read_bytes() for n in METRICS
                if series_path(folder, n).exists()}
    assert run(tmp_path / "a") == run(tmp_path / "b") != {}


def test_a_resume_logs_its_last_pass_again_once(tmp_path):
    # passes 0-2 were logged (2 after its state was saved), then the run died; the
    # resume rebuilds the series from its state's curve, never from the dead run's rows
    _watch(tmp_path, [{"outer": k, "loss": 3.0 - k} for k in range(3)], outer=4)
    lines = _watch(tmp_path, [{"outer": 2, "loss": 1.0}, {"outer": 3, "loss": 0.8}],
                   done=2, outer=4, earlier=[{"outer": k, "loss": 3.0 - k} for k in range(2)])
    publish(tmp_path)
    assert _rows(series_path(tmp_path, "loss"))[1:] == [["0", "3.0"], ["1", "2.0"],
                                                         ["2", "1.0"], ["3", "0.8"]]
    assert lines[0].startswith("[job] resumed after outer 2  loss 1.0000")
    # a fresh run over a dead run's pending curves starts them afresh
    _watch(tmp_path, [{"outer": 0, "loss": 9.0}], outer=4)
    publish(tmp_path)
    assert _rows(series_path(tmp_path, "loss"))[1:] == [["0", "9.0"]]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _bar_lines(width: int, what="[job-dry-001] outer 3/4") -> list[str]:
    """The bar's lines as a terminal `width` columns wide shows them, ANSI codes gone."""
    import re

    term = _Terminal()
    with Progress(what, total=32, done=16, unit="micro-steps", stream=term, tty=True,
                  width=width) as bar:
        bar.advance(note="loss 2.1000  held-out 2.3000  48,000 tok/s")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.getvalue())
    return [ln.rstrip() for ln in re.split(r"[\r\n]", text) if ln.strip()]


def test_the_bar_fits_80_columns_dropping_the_least_useful_cells_first():
    lines = _bar_lines(80)
    assert lines and all(len(ln) <= 80 for ln in lines)
    last = lines[-1]
    # the description, the counts and the ETA whole; the unit and the elapsed time dropped
    assert last.startswith("[job-dry-001] outer 3/4 ") and " 17/32 ETA " in last
    assert "micro-steps" not in last and "0:00:" not in last
    assert "━" in last and "loss 2.1000  held-out 2.3000" in last   # a short bar, the losses


def test_at_120_columns_the_bar_keeps_every_cell():
    lines = _bar_lines(120)
    assert all(len(ln) <= 120 for ln in lines)
    last = lines[-1]
    assert "[job-dry-001] outer 3/4" in last and "17/32 micro-steps 0:00:00 ETA" in last
    assert "loss 2.1000  held-out 2.3000" in last
    assert last.count("━") + last.count("╸") + last.count("╺") == 24   # the full bar
