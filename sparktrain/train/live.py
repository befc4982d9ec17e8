"""The loop's watcher: a curve point per outer pass to DVCLive (through a pending `.live-run/`),
the lines, the bar on a terminal (docs/training.md "Curves and progress")."""
from __future__ import annotations

import contextlib
import errno
import math
import os
import stat
import sys
import time
from pathlib import Path

from dvclive import Live
from dvclive import env as dvclive_env

from sparktrain.core.fsutil import LinkInPath, folder_fd, pinned_folder, write_at
from sparktrain.core.jobfiles import LIVE_DIR, LIVE_PENDING
from sparktrain.core.progress import Progress
from sparktrain.train.outputs import remove_entry

METRICS = ("loss", "heldout_loss", "heldout_bpb", "lr")
# a record key's DVCLive series where the name alone would mislead (a 64-window estimate)
SERIES = {"heldout_bpb": "heldout_bpb_64window_estimate"}
# dvc.yaml's plots of the step: each one's file exists after a run (header only if none)
PLOTS = ("loss", "heldout_loss", "heldout_bpb_64window_estimate")


SERIES_DIR = Path(LIVE_DIR, "plots", "metrics")  # DVCLive's folder of the series


class FilesLive(Live):
    """DVCLive, whose DVC set-up runs only where the run is an experiment: a stage of `dvc
    exp run` (DVC sets DVC_ROOT and DVC_EXP_BASELINE_REV), where DVCLive records it as it
    always does (the experiment's name, DVC Studio's live updates). Elsewhere (`spark
    train`, `dvc repro`) it writes only its files: its set-up would open the DVC
    repository for nothing (half a second a run) and, in a git checkout without DVC, run
    `dvc init` and `git add` the new .dvc/ there."""

    def _init_dvc(self):
        if os.getenv(dvclive_env.DVC_ROOT) and os.getenv(dvclive_env.DVC_EXP_BASELINE_REV):
            super()._init_dvc()
        else:   # the one attribute of the set-up that `dvc_file` reads
            self._dvc_file = self._init_dvc_file()


def series_path(folder: str | os.PathLike, name: str) -> Path:
    """The TSV DVCLive keeps for one series: dvclive/plots/metrics/<name>.tsv."""
    return Path(folder) / SERIES_DIR / f"{name}.tsv"


class StderrLines:
    """The default `progress`: stderr lines, `first` only before one (a refusal stays alone)."""

    def __init__(self, first: str | None = None):
        self.pending = [first] if first else []

    def __call__(self, line: str) -> None:
        while self.pending:
            print(self.pending.pop(), file=sys.stderr, flush=True)
        print(line, file=sys.stderr, flush=True)


def losses(point: dict) -> str:
    """A curve point as the lines and the bar show it."""
    text = f"loss {point['loss']:.4f}"
    if "heldout_loss" in point:
        text += f"  held-out {point['heldout_loss']:.4f}"
    if "heldout_bpb" in point:
        text += f" ({point['heldout_bpb']:.3f} bpb, 64-window est.)"
    return text


class Watcher:
    """What a person and DVC see of one run: `start` once, `micro_step` after every update,
    `pass_done` per outer pass; the ETA counts only this process's work."""

    def __init__(self, job_id: str, folder: str | os.PathLike, outer: int, inner: int,
                 progress=None):
        self.job_id, self.folder = job_id, Path(folder)
        self.outer, self.inner = outer, inner
        self.progress = progress if progress is not None else StderrLines()
        self.t0 = time.perf_counter()
        self.live = self.bar = self.pin = None
        self.point: dict = {}

    def say(self, line: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        (self.progress if self.bar is None else self.bar.log)(line)

    def start(self, point: dict, lr: float, done: int, what: str, earlier=()) -> None:
        """The run begins at `point`, `done` passes behind it (`earlier`: their (point, lr))."""
        self.point, self.first, self.t_start = point, done, time.perf_counter()
        self.progress(f"[{self.job_id}] {'resumed after outer ' + str(done) if done else 'start'}"
                      f"  {losses(point)}  {what}")
        if isinstance(self.progress, StderrLines) and sys.stderr.isatty():
            self.bar = Progress(self._where(min(done + 1, self.outer)),
                                total=self.outer * self.inner, done=done * self.inner,
                                unit="micro-steps", stream=sys.stderr, tty=True)
        # a dead run's pending curves are never read back: rebuilt in a folder made afresh
        with folder_fd(self.folder, create=True) as fd:  # the job's, locked by now
            remove_entry(fd, LIVE_PENDING)
            os.mkdir(LIVE_PENDING, 0o777, dir_fd=fd)
        self.pin, pinned = pinned_folder(self.folder)  # DVCLive writes by path: pin it
        self.live = FilesLive(dir=str(pinned / LIVE_PENDING / LIVE_DIR), save_dvc_exp=False,
                              dvcyaml=None, report=None)
        for old, old_lr in earlier:
            self._log_live(old, old_lr)
        self._log_live(point, lr)

    def _where(self, k: int) -> str:
        return f"[{self.job_id}] outer {k}/{self.outer}"

    def micro_step(self, k: int, rate: float) -> None:
        """One update of pass `k` is done; `rate` is this process's tokens/s."""
        if self.bar is not None:
            self.bar.describe(self._where(k))
            self.bar.advance(note=f"{losses(self.point)}  {rate:,.0f} tok/s")

    def pass_done(self, point: dict, lr: float, rate: float) -> None:
        """Outer pass `point["outer"]` is measured: DVCLive's row and one line."""
        self.point, k = point, point["outer"]
        self._log_live(point, lr)
        now = time.perf_counter()
        eta = (now - self.t_start) / (k - self.first) * (self.outer - k)
        self.say(f"{self._where(k)}  {losses(point)}  {rate:,.0f} tok/s  "
                 f"{now - self.t0:.1f}s, ~{eta:.0f}s left")

    def _log_live(self, point: dict, lr: float) -> None:
        _real_folders(self.folder / LIVE_PENDING)
        self.live.step = int(point["outer"])
        record = {**point, "lr": lr}
        for name in METRICS:
            value = record.get(name)
            if value is not None and math.isfinite(float(value)):
                self.live.log_metric(SERIES.get(name, name), float(value))
        self.live.next_step()   # the summary, and the step-done signal editors watch

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:   # closed first: whatever happens after it started
            self.bar.close()
            self.bar = None
        try:
            if self.live is not None:
                live, self.live = self.live, None
                _real_folders(self.folder / LIVE_PENDING)
                live.end()
                _declared_series(self.folder / LIVE_PENDING)
        finally:
            if self.pin is not None:
                os.close(self.pin)
                self.pin = None


def _real_folders(pending: Path) -> None:
    """Before DVCLive writes by path: its folders real, its files no links (docs/outputs.md)."""
    for folder, names in ((pending / LIVE_DIR, ("metrics.json",)),
                          (pending / SERIES_DIR, [f"{SERIES.get(m, m)}.tsv" for m in METRICS])):
        with folder_fd(folder, create=True) as fd:
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise LinkInPath(errno.ELOOP, f"{folder / name} is a symbolic link "
                                         "(links are never followed when writing)")


def _declared_series(folder: Path) -> None:
    """Every series of `PLOTS` has its file (the header only where the run logged none)."""
    with folder_fd(folder / SERIES_DIR, create=True) as fd:
        for name in PLOTS:
            try:
                os.stat(f"{name}.tsv", dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                write_at(fd, f"{name}.tsv", f"step\t{name}{os.linesep}".encode())
