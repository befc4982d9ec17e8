"""The project's own error type (a user mistake, reported as one line, exit 2) and the one
escaping helper for text that reaches a terminal: whatever a user or a file controls goes
through `printable` before it is printed (docs/outputs.md, "Terminal safety"); the one
column printer."""
from __future__ import annotations

import difflib
import io
import sys

# C0 controls, DEL and C1 controls: bytes that steer a terminal instead of showing
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
# Unicode that reorders or breaks what a line shows: bidi embeddings, overrides and
# isolates, line and paragraph separators
_INVISIBLE = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029, 0x200E, 0x200F]
_ESCAPES = {c: f"\\x{c:02x}" for c in _CONTROLS}
_ESCAPES.update({c: f"\\u{c:04x}" for c in _INVISIBLE})


def printable(text: str, keep: str = "") -> str:
    """`text` with control characters (except those in `keep`) written as escapes."""
    table = {c: e for c, e in _ESCAPES.items() if chr(c) not in keep}
    return str(text).translate(table)


def printable_lines(text: str) -> str:
    """A multi-line block (a table, a summary): newlines kept, every other control escaped."""
    return printable(text, keep="\n")


def first_line(err: BaseException, limit: int = 160) -> str:
    """An exception's first non-empty line, escaped, cut to `limit`; else its type's name."""
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    return printable(lines[0].strip()[:limit]) if lines else type(err).__name__


def columns(head: list[str], rows: list[list[str]], rule: bool = False,
            tty: bool | None = None) -> list[str]:
    """A table's lines, the one column printer: rich (no colour) when `tty` (default: stdout
    is a terminal), else plain columns two spaces apart; a rule under the head when `rule`."""
    if not (sys.stdout.isatty() if tty is None else tty):
        widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
        lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                 for r in [head] + rows]
        return lines[:1] + ["  ".join("-" * w for w in widths)] + lines[1:] if rule else lines
    from rich import box   # only for a terminal
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  padding=(0, 1, 0, 0))  # two spaces between columns, as the plain ones
    for h in head:  # Text: a cell is never read as rich markup
        table.add_column(Text(h))
    for row in rows:
        table.add_row(*(Text(str(c)) for c in row))
    console = Console(file=io.StringIO(), width=10_000, color_system=None)
    console.print(table)
    return [ln.rstrip() for ln in console.file.getvalue().splitlines()]


def did_you_mean(got: str, known) -> str:
    """ "; did you mean 'x'?" for the closest of `known` (difflib), else ""."""
    close = difflib.get_close_matches(str(got), [str(k) for k in known], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


MAX_MESSAGE = 1000  # characters: a message quoting a 900,000-character value is cut


class SparkError(Exception):
    """A user-facing error. str(err) is the whole one-line message, at most
    MAX_MESSAGE characters (the middle of a longer one becomes "...")."""

    def __init__(self, message="", *rest):
        text = str(message)
        if len(text) > MAX_MESSAGE:
            text = f"{text[:MAX_MESSAGE * 3 // 4]}...{text[-(MAX_MESSAGE // 4 - 3):]}"
        super().__init__(text, *rest)


class BytecodeError(SparkError):
    """Malformed SPARK_BC bytes; the message names the byte offset."""

    def __init__(self, message: str, offset: int):
        super().__init__(f"{message} (at byte offset {offset})")
        self.offset = offset


class SourceError(SparkError):
    """A .spark source mistake; the message names line:col."""

    def __init__(self, message: str, filename: str, line: int, col: int):
        super().__init__(f"{filename}:{line}:{col}: {message}")
        self.line = line
        self.col = col


class TrainingFailed(SparkError):
    """Training ran but must not be claimed (loss did not fall, NaN): exit 1, not 2."""

    exit_code = 1
