"""Progress a person can follow: a `rich` bar on a terminal, one plain line per unit of
work elsewhere; the ETA counts only this process's work (docs/training.md, "Progress")."""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Column


def eta_seconds(done_at_start: int, done: int, total: int | None,
                seconds: float) -> float | None:
    """Seconds left at this process's rate (units done before a resume took no time here);
    None before the first unit."""
    did = done - done_at_start
    if total is None or did <= 0 or seconds <= 0:
        return None
    return max(total - done, 0) * seconds / did


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    """`advance()` once per unit of work: a fitting bar on a terminal (a note kept until a
    new one), else one line "WHAT: 3/8 UNIT, 12s elapsed, ETA 20s, NOTE"; `log` a line."""

    def __init__(self, what: str, total: int | None, done: int = 0, unit: str = "",
                 stream: TextIO | None = None, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, width: int | None = None):
        self.what, self.total, self.unit = what, total, unit
        self.done = self.done_at_start = done
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock, self.started = clock, clock()
        self._bar = self._task = None
        if self.tty:
            console = Console(file=self.stream, force_terminal=True,
                              width=terminal_width(self.stream, width))
            self._bar = _FittingBar(unit, console=console, expand=True)
            self._task = self._bar.add_task(what, total=total, completed=done, eta="-", note="")
            self._bar.start()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    @property
    def eta(self) -> float | None:
        return eta_seconds(self.done_at_start, self.done, self.total, self.elapsed)

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self.done += n
        if self._bar is not None:
            kept = {} if note is None else {"note": note}
            self._bar.update(self._task, completed=self.done, eta=format_seconds(self.eta), **kept)
            return
        of = f"/{self.total}" if self.total is not None else ""
        unit = f" {self.unit}" if self.unit else ""
        tail = f", {note}" if note else ""
        self.log(f"{self.what}: {self.done}{of}{unit}, "
                 f"{format_seconds(self.elapsed)} elapsed, "
                 f"ETA {format_seconds(self.eta)}{tail}")

    def describe(self, what: str) -> None:
        """A new description (the bar's text, the plain lines' prefix)."""
        self.what = what
        if self._bar is not None:
            self._bar.update(self._task, description=what)

    def log(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


NOTE_MIN = 28   # the note's room before the bar gives up a cell: "loss 2.1000  held-out 2.3000"


class _FittingBar(RichProgress):
    """A rich bar that drops its least useful cells (unit, elapsed, then the bar) until it
    and NOTE_MIN columns of note fit the width, at every refresh (docs/training.md)."""

    def __init__(self, unit: str, **kw):
        # descriptions and notes are text, never rich markup ("[job-1] ..." stays)
        fixed = {"table_column": Column(no_wrap=True)}
        what = TextColumn("{task.description}", markup=False, **fixed)
        counts = MofNCompleteColumn(**fixed)
        self.eta = eta = TextColumn("ETA {task.fields[eta]}", **fixed)
        unit_cell = TextColumn(unit, markup=False, **fixed)
        elapsed = TimeElapsedColumn(**fixed)
        self.note = TextColumn("{task.fields[note]}", markup=False,
                               table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1))
        wide, narrow = BarColumn(bar_width=24, **fixed), BarColumn(bar_width=10, **fixed)
        self.layouts = [(what, wide, counts, unit_cell, elapsed, eta, self.note),
                        (what, wide, counts, elapsed, eta, self.note),
                        (what, wide, counts, eta, self.note),
                        (what, narrow, counts, eta, self.note),
                        (what, counts, eta, self.note)]
        super().__init__(*self.layouts[0], **kw)

    def _needs(self, columns, tasks) -> int:
        """Columns the cells, NOTE_MIN of note and the gaps take (the ETA at its widest)."""
        options = self.console.options
        need = len(columns) - 1
        for column in columns:
            if column is self.note:
                need += NOTE_MIN
                continue
            need += max([Measurement.get(self.console, options, column(task)).maximum
                         for task in tasks] + [len("ETA 59m59s") if column is self.eta else 0])
        return need

    def make_tasks_table(self, tasks):
        if not tasks or not hasattr(self, "live"):   # rich's first render, in its __init__
            return super().make_tasks_table(tasks)
        width = self.console.width
        self.columns = next((c for c in self.layouts if self._needs(c, tasks) <= width),
                            self.layouts[-1])
        return super().make_tasks_table(tasks)


MAX_COLUMNS = 1000  # a COLUMNS of 1e9 must not size a billion-character bar
MIN_COLUMNS = 20


def terminal_width(stream: TextIO, width: int | None = None) -> int:
    """`width`, else what rich finds (COLUMNS or the terminal's size), clamped."""
    if width is None:
        width = Console(file=stream, force_terminal=True).width
    return max(MIN_COLUMNS, min(int(width), MAX_COLUMNS))
