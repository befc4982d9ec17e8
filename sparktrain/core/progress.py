"""Progress a person can follow: a `rich` bar on a terminal, one plain line per unit of
work elsewhere; the ETA counts only this process's work (docs/training.md, "Progress")."""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from sparktrain.core.errors import printable


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
    new one), else one line "WHAT: 3/8 UNIT, 12s elapsed, ETA 20s, NOTE"; `log` a line.
    Every text it shows (a path in a note, a logged line) has its control characters
    escaped (errors.printable): a file name cannot move the cursor or retitle the window."""

    def __init__(self, what: str, total: int | None, done: int = 0, unit: str = "",
                 stream: TextIO | None = None, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, width: int | None = None):
        self.what, self.total, self.unit = printable(what), total, printable(unit)
        self.done = self.done_at_start = done
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock, self.started = clock, clock()
        self._bar = self._task = None
        if self.tty:   # rich loads only here: a stage or a piped run never pays its import
            from rich.console import Console

            from sparktrain.core.richbar import FittingBar

            console = Console(file=self.stream, force_terminal=True,
                              width=terminal_width(self.stream, width))
            self._bar = FittingBar(unit, console=console, expand=True)
            self._task = self._bar.add_task(self.what, total=total, completed=done, eta="-",
                                            note="")
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
            kept = {} if note is None else {"note": printable(note)}
            self._bar.update(self._task, completed=self.done, eta=format_seconds(self.eta), **kept)
            return
        of = f"/{self.total}" if self.total is not None else ""
        unit = f" {self.unit}" if self.unit else ""
        tail = f", {printable(note)}" if note else ""
        self.log(f"{self.what}: {self.done}{of}{unit}, "
                 f"{format_seconds(self.elapsed)} elapsed, "
                 f"ETA {format_seconds(self.eta)}{tail}")

    def describe(self, what: str) -> None:
        """A new description (the bar's text, the plain lines' prefix)."""
        self.what = what = printable(what)
        if self._bar is not None:
            self._bar.update(self._task, description=what)

    def log(self, line: str) -> None:
        line = printable(line)
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


MAX_COLUMNS = 1000  # a COLUMNS of 1e9 must not size a billion-character bar
MIN_COLUMNS = 20


def terminal_width(stream: TextIO, width: int | None = None) -> int:
    """`width`, else what rich finds (COLUMNS or the terminal's size), clamped."""
    if width is None:
        from rich.console import Console

        width = Console(file=stream, force_terminal=True).width
    return max(MIN_COLUMNS, min(int(width), MAX_COLUMNS))
