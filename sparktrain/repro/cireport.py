"""`spark ci-report`: this branch's run against a base branch's, as the one Markdown report a
pull request gets (docs/ci.md): the `spark repro-check` verdict, the metrics and the params
that differ as tables, and the curves that changed as charts the forge draws (Mermaid).
The base's files are read through DVC at its commit (git, then the DVC cache: pull or
reproduce them first), this branch's from the workspace."""
from __future__ import annotations

import os
from pathlib import Path

from sparktrain.core.errors import SparkError, printable
from sparktrain.core.fsutil import atomic_write_text, read_input
from sparktrain.core.gate import REPORT_MARK, check_output
from sparktrain.core.jobfiles import EVAL, PARAMS_FILE, job_dir
from sparktrain.core.metric_keys import HEADLINE_KEYS
from sparktrain.core.safeload import load_yaml
from sparktrain.eval.compare import (Experiment, add_curves, changed_params, metric_text,
                                     read_checkpoint, record)
from sparktrain.eval.experiments import DvcExperiments, ExpRow
from sparktrain.eval.mermaid import line_charts
from sparktrain.eval.plot import write_compare_png
from sparktrain.repro.toolenv import git

WORKSPACE = "workspace"          # the rev that means the files on disk
HEAD_NAME = "this branch"
VERDICT = "repro-check: "        # the head of `spark repro-check`'s last line
VALUE_CHARS = 60                 # a param's value in a cell, at most
# (title, y label, the Experiment's curve, its key)
CURVES = (("training loss per outer pass", "loss", "loss_curve", "loss"),
          ("held-out loss per outer pass", "loss", "heldout", "loss"),
          ("held-out bits per byte per outer pass (64-window estimate)", "bits per byte",
           "heldout_bpb", "bpb"))


class BranchReader:
    """Files at the base's commit through DVC; WORKSPACE's from disk (capped)."""

    def __init__(self, dvc: DvcExperiments):
        self.dvc = dvc

    def read(self, path: str, rev: str) -> bytes | None:
        if rev != WORKSPACE:
            return self.dvc.read(path, rev)
        return read_input(path, "eval file") if os.path.lexists(path) else None


def base_commit(base: str) -> str:
    done = git("rev-parse", "--verify", "-q", f"{base}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise SparkError(f"--base {printable(base)[:80]}: no such commit here; fetch it "
                         f"(`git fetch origin main`, or actions/checkout's fetch-depth: 0)")
    return done.stdout.strip()


def this_branch(source: BranchReader) -> Experiment:
    params = load_yaml(read_input(PARAMS_FILE, "params file"), PARAMS_FILE) or {}
    job = params.get("job") if isinstance(params, dict) else None
    path = (job_dir(str(job)) / EVAL).as_posix()
    if not os.path.lexists(path):
        raise SparkError(f"no {path} in the workspace; run `dvc repro` (or `dvc pull`) first")
    exp = record(ExpRow(HEAD_NAME, WORKSPACE, HEAD_NAME), source)
    add_curves(exp, read_checkpoint(exp, source))
    return exp


def base_branch(source: BranchReader, name: str, rev: str) -> tuple[Experiment | None, str]:
    """(the base's run, "") or (None, why its outputs cannot be read)."""
    try:
        exp = record(ExpRow(name, rev, name), source)
        add_curves(exp, read_checkpoint(exp, source))
    except SparkError as err:
        return None, str(err)
    return exp, ""


def verdict_lines(text: str) -> tuple[str, list[str]]:
    """(`spark repro-check`'s verdict line, the lines before it)."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    found = [i for i, ln in enumerate(lines) if ln.startswith(VERDICT)]
    if not found:
        raise SparkError(f"--repro-check: no `{VERDICT.strip()}` verdict line in it; save "
                         f"`spark repro-check`'s output there (docs/ci.md)")
    return lines[found[-1]], lines[:found[-1]]


def _cell(value) -> str:
    text = printable(str(value) if isinstance(value, str) else repr(value) if value is not None
                     else "none")
    text = text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 1] + "…"
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    rule = ["---"] + ["---:"] * (len(head) - 1)
    return [f"| {' | '.join(r)} |" for r in [head, rule, *rows]]


def metric_rows(base: Experiment | None, head: Experiment) -> list[list[str]]:
    rows = []
    named = [("training loss, last pass", "loss", lambda e: e.loss_curve[-1]["loss"])]
    named += [(f"held-out {k}" if k == "loss" else k, k, lambda e, k=k: e.metrics.get(k))
              for k in HEADLINE_KEYS if k in head.metrics or (base and k in base.metrics)]
    for label, key, value in named:
        now, was = value(head), value(base) if base else None
        change = ""
        if isinstance(now, (int, float)) and isinstance(was, (int, float)):
            change = "=" if now == was else f"{now - was:+.4g}" + (
                f" ({(now - was) / abs(was):+.1%})" if was else "")
        rows.append([label, metric_text(key, was), metric_text(key, now), change])
    return rows


def pictures(base: Experiment | None, head: Experiment, base_name: str) -> list[str]:
    lines, same = [], []
    for title, y_label, curve, key in CURVES:
        mine = [(p["outer"], p[key]) for p in getattr(head, curve)]
        theirs = [(p["outer"], p[key]) for p in getattr(base, curve)] if base else []
        if max(len(mine), len(theirs)) < 2:
            continue              # a single point is a metric, in the table above
        if base and mine == theirs:
            same.append(title)
            continue
        runs = ([(base_name, theirs)] if theirs else []) + [(HEAD_NAME, mine)]
        lines += [f"**{title}**", "", line_charts(title, y_label, runs), ""]
    if same:
        lines.append(f"The same as {base_name}: {', '.join(same)}.")
    return lines or ["No curves to draw."]


def build(base: str, repro_text: str | None) -> tuple[str, dict]:
    """(the report's Markdown, the two runs as `spark compare` draws them)."""
    rev = base_commit(base)
    with DvcExperiments() as dvc:
        source = BranchReader(dvc)
        head = this_branch(source)
        theirs, why = base_branch(source, base, rev)
    lines = [REPORT_MARK.decode(), f"## Spark Train: {HEAD_NAME} against `{base}` "
             f"({rev[:7]})", ""]
    if repro_text is not None:
        last, before = verdict_lines(repro_text)
        mark = "✅" if last.startswith(VERDICT + "ok") else "❌"
        lines += [f"**Reproducibility** {mark} `{printable(last)}`", ""]
        if before:
            lines += ["<details><summary>spark repro-check said</summary>", "", "```",
                      *(printable(ln) for ln in before), "```", "</details>", ""]
    job = head.params.get("job")
    lines += [f"### Metrics (job `{job}`)", ""]
    if theirs is None:
        lines += [f"{base}'s outputs could not be read ({printable(why)}); pull them "
                  f"(`dvc pull` with a remote) or reproduce {base} into the same DVC "
                  f"cache (docs/ci.md).", ""]
    lines += table(["metric", base, HEAD_NAME, "change"], metric_rows(theirs, head)) + [""]
    keys, _ = changed_params([e for e in (theirs, head) if e], [])
    lines += [f"### Params that differ from {base}", ""]
    if theirs is None:
        lines += ["Not known: the base's run is not readable.", ""]
    elif keys:
        lines += table(["param", base, HEAD_NAME], [[f"`{k}`", _cell(theirs.params.get(k)),
                                                     _cell(head.params.get(k))] for k in keys])
        lines.append("")
    else:
        lines += [f"None: the same params as {base}.", ""]
    lines += ["### Curves that changed", "", *pictures(theirs, head, base)]
    runs = [e for e in (theirs, head) if e]
    for number, exp in enumerate(runs, 1):
        exp.number, exp.label = number, exp.name
    return "\n".join(lines).rstrip() + "\n", {"changed_params": keys, "experiments": runs}


def write_report(base: str, out: str, repro_check: str | None = None,
                 png: str | None = None) -> None:
    """Check where it goes, read, then write the report (and the PNG of both runs)."""
    target = check_output(out, "report", (repro_check, PARAMS_FILE))
    picture = check_output(png, "png", (repro_check, out)) if png else None
    if picture is not None and Path(os.path.abspath(picture)) == Path(os.path.abspath(target)):
        raise SparkError("--png and --out name the same file; give two names")
    text = (read_input(repro_check, "eval file").decode("utf-8", "replace")
            if repro_check else None)
    markdown, runs = build(base, text)
    if picture is not None:
        write_compare_png(picture, runs)
    atomic_write_text(target, markdown)
