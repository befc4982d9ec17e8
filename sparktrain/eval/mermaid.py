"""Line charts as Mermaid text (`xychart-beta`), which GitHub and GitLab draw inside a
Markdown page or comment: the pictures of a pull request's report, with no image host
(docs/ci.md). Each run is a line in its own colour; the caption names the colours."""
from __future__ import annotations

from typing import Sequence

# the colours of the runs, in order (matplotlib's tab10 blue, red, green, ...)
COLOURS = (("#1f77b4", "blue"), ("#d62728", "red"), ("#2ca02c", "green"), ("#9467bd", "purple"))


def _number(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".") if value == value else "0"


def _chart(title: str, y_label: str, xs: list, lines: list[list[float]], colours) -> str:
    palette = ", ".join(code for code, _ in colours)
    head = ('%%{init: {"themeVariables": {"xyChart": {"plotColorPalette": "'
            + palette + '"}}}}%%')
    shown = title.replace('"', "'")   # a quote would end Mermaid's string
    body = [head, "xychart-beta", f'    title "{shown}"',
            f'    x-axis "outer pass" [{", ".join(_number(x) for x in xs)}]',
            f'    y-axis "{y_label}"']
    body += [f"    line [{', '.join(_number(y) for y in ys)}]" for ys in lines]
    return "```mermaid\n" + "\n".join(body) + "\n```"


def line_charts(title: str, y_label: str,
                runs: Sequence[tuple[str, Sequence[tuple[float, float]]]]) -> str:
    """`runs` ((name, [(x, y), ...]), ...) as Markdown: one chart when every run has the same
    x values, else one chart per run (a Mermaid line has no x of its own); a caption under."""
    runs = [(name, list(points)) for name, points in runs if points][:len(COLOURS)]
    if not runs:
        return ""
    colours = COLOURS[:len(runs)]
    caption = "; ".join(f"{word}: {name}" for (name, _), (_, word) in zip(runs, colours))
    xs = [x for x, _ in runs[0][1]]
    if all([x for x, _ in points] == xs for _, points in runs):
        chart = _chart(title, y_label, xs, [[y for _, y in points] for _, points in runs],
                       colours)
        return f"{chart}\n\n{caption}"
    charts = [_chart(f"{title}: {name}", y_label, [x for x, _ in points],
                     [[y for _, y in points]], [colour])
              for (name, points), colour in zip(runs, colours)]
    return "\n\n".join(charts) + f"\n\n{caption}"
