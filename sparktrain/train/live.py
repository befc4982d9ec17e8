"""One record per outer pass, to every place that shows it: DVCLive's files in the
job folder (`out/train/<job>/dvclive/`, drawn by `dvc plots`, the VS Code
extension and DVC Studio) and the progress line or bar (sparktrain/progress.py).

The loop builds one dict per outer pass (the same record that becomes a
`loss_curve` entry of checkpoint.json) and hands it to `PassLogger.log_pass`;
nothing else logs it by hand. DVCLive runs with `save_dvc_exp=False` and
`dvcyaml=None`: inside a DVC stage it must not start experiments of its own nor
edit the project's dvc.yaml (the plots are declared there). `step` is the outer
pass. See docs/training.md ("Curves and progress").

The series written are `METRICS`, all decided by the inputs (the same run writes
the same bytes), so a stage may declare them as outputs.
"""
from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Callable, TextIO

from dvclive import Live

from sparktrain.jobfiles import LIVE_DIR
from sparktrain.progress import Progress

METRICS = ("loss", "heldout_loss", "heldout_bpb", "lr")
# The series dvc.yaml declares as plots of the step: each one's file exists after a
# run (a stage output must), with its header only when the job measures none
# (held-out bits per byte are a corpus job's; a pairs job's series is empty).
PLOTS = ("loss", "heldout_loss", "heldout_bpb")


def series_path(folder: str | os.PathLike, name: str) -> Path:
    """The TSV DVCLive keeps for one series: dvclive/plots/metrics/<name>.tsv."""
    return Path(folder) / LIVE_DIR / "plots" / "metrics" / f"{name}.tsv"


def _trim_series(folder: Path, start_outer: int) -> None:
    """Drop the rows of passes at or after `start_outer`: a run that crashed after
    logging a pass but before committing it logs that pass again on resume."""
    for name in METRICS:
        path = series_path(folder, name)
        if not path.is_file():
            continue
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        kept = rows[:1] + [r for r in rows[1:] if r and int(r[0]) < start_outer]
        with open(path, "w", newline="", encoding="utf-8") as f:
            csv.writer(f, delimiter="\t", lineterminator=os.linesep).writerows(kept)


class PassLogger:
    """Feeds DVCLive and the progress display one record per outer pass.

    `folder` is the job folder; `total` the outer passes of the whole run;
    `start_outer` the passes already done before this process (0 on a fresh run,
    the checkpoint's count after a resume: earlier DVCLive rows are kept, the ETA
    counts only this process's passes). `display=False`: DVCLive only, no progress
    (the training loop draws its own lines and bar).
    """

    def __init__(self, folder: str | os.PathLike, total: int, start_outer: int = 0,
                 what: str = "step", stream: TextIO | None = None, tty: bool | None = None,
                 clock: Callable[[], float] | None = None, display: bool = True):
        self.folder = Path(folder)
        resume = start_outer > 0 and (self.folder / LIVE_DIR).is_dir()
        if resume:
            _trim_series(self.folder, start_outer)
        self.live = Live(dir=str(self.folder / LIVE_DIR), resume=resume, save_dvc_exp=False,
                         dvcyaml=None, report=None)
        extra = {"clock": clock} if clock is not None else {}
        self.progress = (Progress(what, total=total, done=start_outer, unit="passes",
                                  stream=stream, tty=tty, **extra) if display else None)

    def log_pass(self, record: dict) -> None:
        """`record`: {"outer", "loss", and any of "heldout_loss", "heldout_bpb",
        "lr"} (a "tokens_per_s" shows in the progress line only); `outer` is the
        pass's index (DVCLive's step)."""
        self.live.step = int(record["outer"])
        for name in METRICS:
            value = record.get(name)
            if value is not None and math.isfinite(float(value)):
                self.live.log_metric(name, float(value))
        self.live.next_step()   # the summary, and the step-done signal editors watch
        if self.progress is not None:
            self.progress.advance(1, note=_note(record))

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        self.live.end()
        for name in PLOTS:
            path = series_path(self.folder, name)
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "w", newline="", encoding="utf-8") as f:
                    csv.writer(f, delimiter="\t", lineterminator=os.linesep).writerow(
                        ["step", name])

    def __enter__(self) -> "PassLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _note(record: dict) -> str:
    parts = [f"loss {record['loss']:.4f}"]
    if record.get("heldout_loss") is not None:
        parts.append(f"held-out {record['heldout_loss']:.4f}")
    if record.get("heldout_bpb") is not None:
        parts.append(f"{record['heldout_bpb']:.3f} bpb")
    if record.get("tokens_per_s"):
        parts.append(f"{record['tokens_per_s']:,.0f} tok/s")
    return ", ".join(parts)
