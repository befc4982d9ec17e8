"""The terminal bar of sparktrain/core/progress.py, apart: only a run on a terminal
imports `rich` (~60 ms of a stage's ~0.4 s start-up, and of every piped command's)."""
from __future__ import annotations

from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Column

NOTE_MIN = 28   # the note's room before the bar gives up a cell: "loss 2.1000  held-out 2.3000"


class FittingBar(RichProgress):
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
