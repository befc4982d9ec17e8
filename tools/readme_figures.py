"""Regenerate the measured figures of README.md (and of the pages in PAGES: docs/
pages that show a whole captured run) from real runs on this machine.

    .venv/bin/python tools/readme_figures.py            # every figure; rewrites PAGES
    .venv/bin/python tools/readme_figures.py --quick    # the quick figures, tiny; no page
    .venv/bin/python tools/readme_figures.py --stable   # what runs reproduce exactly
    make readme-figures                                 # the first line

Every run is in a fresh copy of the project; the record (out/readme_figures.json)
holds the machine (cores, CPU model, SIMD flags, load before and after), the date
and each figure's numbers and raw output, and the pages' `<!-- figures:NAME -->`
blocks are rewritten from it: no figure in them is typed by hand. Wall times are
stretched by other processes on the same cores; losses, bpb and hashes are not.
See docs/tools.md ("README figures").
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparktrain import runtime  # noqa: E402  (first: the BLAS kernel and threads)

runtime.start()

from sparktrain.repro.toolenv import copy_project, tool_env  # noqa: E402
from tools.pr_workflow import run_workflow  # noqa: E402
from tools.proof import TABLE_BEGIN, TABLE_END  # noqa: E402
from tools.readme_pages import (PAGES, blocks, ci_report_blocks, coder_figures,  # noqa: E402
                                coder_line, exp_named, exp_rows, rewrite)
from sparktrain.core.safeload import load_json

RECORD = ROOT / "out" / "readme_figures.json"
COLUMNS = 200   # the terminal width the tables are printed at (dvc's are cut to fit)
# README's "Sweep and compare" grid, the command that lists it, and the experiment
# its diff commands name (found by its params: the names are random per run)
GRID = ("step.lr=0.02,0.05", "step.seed=0,1")
SHOW_TEXT = "dvc exp show --only-changed --drop 'Created|State|Executor|^out/'"
SHOW = ("dvc", "exp", "show", "--only-changed", "--drop", "Created|State|Executor|^out/")
PICK = {"step.lr": "0.02", "step.seed": "1"}
STABLE_RECORD = ROOT / "out" / "readme_figures.stable.json"
SPARK_SWEEP = ("sweep", "-S", "step.lr=0.05,0.2", "-S", "step.seed=0,1", "--workers", "2")
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni",
              "amx_tile", "asimd", "sve")


# --- the machine ---------------------------------------------------------------

def machine() -> dict:
    """Cores, CPU model and SIMD flags, the BLAS numpy uses, load, date."""
    import numpy as np

    model, flags = platform.processor() or platform.machine(), []
    try:
        text = Path("/proc/cpuinfo").read_text()
        found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        model = found.group(1).strip() if found else model
        have = set((re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
                    or re.match("()", "")).group(1).split())
        flags = [f for f in SIMD_FLAGS if f in have]
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": model, "simd_flags": flags, "arch": platform.machine(),
        "python": platform.python_version(), "numpy": np.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


# --- the runs --------------------------------------------------------------------

def _run(cwd: Path, *cmd: str, timeout: float = 3600,
         stdout_only: bool = False) -> tuple[float, str]:
    """(wall seconds, stdout+stderr) of a command that must succeed; `stdout_only`:
    stderr (DVC's warnings, progress lines) kept apart, shown only on a failure."""
    t0 = time.perf_counter()
    done = subprocess.run(list(cmd), cwd=cwd, env=tool_env(cwd, {"COLUMNS": str(COLUMNS)}),
                          stdout=subprocess.PIPE, text=True, timeout=timeout,
                          stderr=subprocess.PIPE if stdout_only else subprocess.STDOUT)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = "\n".join((done.stdout + (done.stderr or "")).splitlines()[-15:])
        raise SystemExit(f"readme_figures: {' '.join(cmd)} exited {done.returncode}:\n{tail}")
    return wall, done.stdout


def _repro_copy(work: Path) -> Path:
    """A fresh copy after `dvc repro`, as `make run` leaves a clone (made once per run of
    this tool). dvc.lock is committed in it when the run re-recorded it (a branch whose
    lock is stale), so `git checkout dvc.lock` there means what it means in a release."""
    repo = work / "run"
    if not (repo / "out").is_dir():
        copy_project(ROOT, repo)
        _run(repo, "dvc", "repro")
        _run(repo, "git", "commit", "-q", "--allow-empty", "-am", "dvc.lock as this run records it")
    return repo


def _fence(*parts: str) -> str:
    """A code block of the parts' lines, trailing blanks cut (dvc pads its tables)."""
    lines = [ln.rstrip() for p in parts for ln in p.rstrip("\n").split("\n")]
    return "```\n" + "\n".join(lines) + "\n```"


def fig_run(work: Path, quick: bool) -> dict:
    """What `make run` prints after its `dvc repro`: `spark status --summary`, verbatim.
    Stable (dvc.lock reproduces it): the losses, the weights' sha256, the held-out
    metrics; the speed line moves with the machine and its load."""
    repo = _repro_copy(work)
    _, out = _run(repo, sys.executable, "-m", "sparktrain.cli", "status", "--summary",
                  stdout_only=True)
    return {"summary": out.rstrip("\n").splitlines(), "text": _fence(out)}


def fig_grid(work: Path, quick: bool) -> dict:
    """docs/experiments.md's "Sweep and compare" (and README's row of it): the 2x2 grid
    through DVC's queue, then `dvc exp show`, the diffs against the experiment PICK
    names, `spark compare`. The metrics are stable; experiment names and revs are new
    in every run (the blocks say so)."""
    repo = _repro_copy(work)
    _run(repo, "dvc", "exp", "run", "--queue", *[a for g in GRID for a in ("-S", g)])
    wall, _ = _run(repo, "dvc", "exp", "run", "--run-all")
    _, show = _run(repo, *SHOW, stdout_only=True)
    pick = exp_named(exp_rows(show), PICK)["name"]
    _, metrics = _run(repo, "dvc", "metrics", "diff", "main", pick, stdout_only=True)
    _, params = _run(repo, "dvc", "params", "diff", "main", pick, stdout_only=True)
    _, compare = _run(repo, sys.executable, "-m", "sparktrain.cli", "compare", stdout_only=True)
    where = ", ".join(f"{k} {v}" for k, v in PICK.items())
    return {"wall_s": round(wall, 1), "pick": pick, "blocks": {
        "grid-show": _fence(f"$ {SHOW_TEXT}", show, "",
                            f"$ dvc metrics diff main <exp>     # <exp> = {pick} here: {where}",
                            metrics, "", "$ dvc params diff main <exp>", params),
        "grid-compare": _fence("$ spark compare", compare),
        # README's short form: the header and PICK's row of the same table
        "grid-line": _fence(*[ln for ln in show.splitlines()
                              if "Experiment" in ln or f"[{pick}]" in ln])}}


def fig_tasks(work: Path, quick: bool) -> dict:
    """README's line under two tasks, in the copy `make run` leaves (a release's lock):
    `spark repro-check`'s verdict, then what `spark export --to hf` says."""
    repo = _repro_copy(work)
    _, check = _run(repo, sys.executable, "-m", "sparktrain.cli", "repro-check",
                    stdout_only=True)
    _, export = _run(repo, sys.executable, "-m", "sparktrain.cli", "export", "--to", "hf",
                     "out/hf", "--weights", "out/train/job-dry-001/weights.safetensors",
                     stdout_only=True)
    return {"blocks": {"repro-check-line": _fence(check.strip().splitlines()[-1]),
                       "export-line": _fence(export.strip().splitlines()[-1])}}


def fig_ci_report(work: Path, quick: bool) -> dict:
    """docs/ci.md's report a pull request gets, and README's head of it: the workflow's
    own steps against a branch that sets step.lr 0.05 (tools/pr_workflow.py)."""
    done = run_workflow(_repro_copy(work), work / "ci-report")
    return {"steps": done.ran, "blocks": ci_report_blocks(done.body)}


def fig_own_data(work: Path, quick: bool) -> dict:
    """README's "Train on your own data" in a fresh copy: `spark train` on the docs, then
    `spark eval`'s two bpb lines (the same for one commit: the docs are the data)."""
    repo = copy_project(ROOT, work / "own-data")
    spark = (sys.executable, "-m", "sparktrain.cli")
    wall, _ = _run(repo, *spark, "train", "--dataset", "docs", "--glob", "*.md",
                   "--out", "out/docs-model", "--device", "cpu")
    _, out = _run(repo, *spark, "eval", "--weights", "out/docs-model/weights.safetensors",
                  stdout_only=True)
    shown = [ln for ln in out.splitlines() if ln.startswith(("  bpb ", "  zlib-9 "))]
    if len(shown) != 2:
        raise SystemExit(f"readme_figures: spark eval printed no bpb lines:\n{out}")
    return {"lines": shown, "wall_s": round(wall, 1), "text": "\n".join([
        f"Trained in {wall:.0f} s on {cpu_label()}; `spark eval` printed:", "",
        _fence(*shown)])}


def fig_spark_sweep(work: Path, quick: bool) -> dict:
    """docs/experiments.md's `spark sweep` table: the 2x2 grid on a 2-worker LocalCluster in a fresh
    copy. Names (a hash of each point's overrides), metrics and hashes are stable."""
    repo = copy_project(ROOT, work / "spark-sweep")
    wall, table = _run(repo, sys.executable, "-m", "sparktrain.cli", *SPARK_SWEEP,
                       stdout_only=True)
    return {"wall_s": round(wall, 1), "text":
            f"A 2x2 grid on the 2-worker LocalCluster ({wall:.0f} s here, every point in its "
            f"own clone):\n\n" + _fence(f"$ spark {' '.join(SPARK_SWEEP[:-2])} --workers 2",
                                        table)}


def fig_pipeline(work: Path, quick: bool) -> dict:
    """The default job's whole pipeline from a fresh copy (`dvc repro`)."""
    repo = copy_project(ROOT, work / "pipeline")
    wall, out = _run(repo, "dvc", "repro")
    return {"wall_s": round(wall, 1), "text": f"whole pipeline from a fresh clone "
                                              f"(`dvc repro`): {wall:.1f} s"}


def cpu_label() -> str:
    """Where a speed shown beside a figure was measured: the CPU model and cores."""
    m = machine()
    return f"{m['cpu']}, {m['usable_cores']} usable cores, load average {m['load_average'][0]}"


def fig_coder_tiny(work: Path, quick: bool) -> dict:
    """`spark code train --scale tiny` in a fresh copy: its per-pass lines, summary, bpb
    table and completions, verbatim (the JSON summary cut to its losses). Losses, bpb
    and completions are stable; tok/s and seconds move with the machine (labelled)."""
    repo = copy_project(ROOT, work / "coder-tiny")
    wall, out = _run(repo, sys.executable, "-m", "sparktrain.cli", "code", "train",
                     "--scale", "tiny", "--device", "cpu")
    lines = []
    for ln in out.rstrip("\n").splitlines():
        if ln.startswith("{"):
            doc = load_json(ln, "the run's summary line")
            ln = (f'{{"job": "{doc["job"]}", "loss_after": {doc["loss_after"]!r}, '
                  f'"loss_before": {doc["loss_before"]!r}, ... "trained": '
                  f'{json.dumps(doc["trained"])}, ...}}')
        lines.append(ln)
    where = f"{wall:.0f} s wall on {cpu_label()}"
    run = "\n".join([
        f"`--scale tiny` in a fresh copy ({where}; tok/s and "
        f"seconds move with the machine, the losses, bpb and completions do not) printed:",
        "", _fence("\n".join(lines))])
    return {"wall_s": round(wall, 1), "lines": lines,
            "blocks": {"coder-tiny": run, "coder-tiny-line": coder_line(lines, where)}}


def fig_scale_proof(work: Path, quick: bool) -> dict:
    """`tools/proof.py scale`; its printed family table, verbatim. Quick: the tiny
    scale for one short pass (the same code path, meaningless numbers)."""
    repo = copy_project(ROOT, work / "scale")
    extra = ["--scale", "tiny", "--outer", "1", "--inner", "2"] if quick else []
    wall, out = _run(repo, sys.executable, "tools/proof.py", "scale", *extra)
    lines = out.splitlines()
    table = lines[lines.index(TABLE_BEGIN) + 1:lines.index(TABLE_END)]
    return {"wall_s": round(wall, 1), "table": table, "quick_budget": quick,
            "text": "\n".join(table) + f"\n\n({wall / 60:.1f} min wall on {cpu_label()}, "
                                        f"the whole proof)"}


def fig_bench(work: Path, quick: bool) -> dict:
    """`spark bench` (tokens/s and utilisation) at tiny and large."""
    found = {}
    for scale in (("tiny",) if quick else ("tiny", "large")):
        extra = ["--steps", "2", "--rounds", "1"] if quick else []
        _, out = _run(ROOT, sys.executable, "-m", "sparktrain.cli", "bench", "--scale", scale,
                      *extra, "--json")
        doc, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])
        found[scale] = {"tokens_per_s": round(doc["tokens_per_s"]), "mfu": doc.get("utilisation"),
                        "batch_size": doc["batch_size"]}
    text = ", ".join(f"{s} batch {v['batch_size']} {v['tokens_per_s']:,} tokens/s"
                     + (f" ({v['mfu'] * 100:.0f} % of the matmul peak)" if v["mfu"] else "")
                     for s, v in found.items())
    return {**found, "text": f"`spark bench`: {text}"}


def fig_workers(work: Path, quick: bool) -> dict:
    """`spark bench --workers 2` at large: 2 shards on 1 worker and on 2, interleaved."""
    extra = ["--steps", "2", "--rounds", "1"] if quick else []
    _, out = _run(ROOT, sys.executable, "-m", "sparktrain.cli", "bench", "--scale", "large",
                  "--workers", "2", *extra, "--json")
    doc, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])
    sc = doc["scaling"]
    one, two = sc["tokens_per_s"]
    return {**sc, "text": f"`spark bench --scale large --workers 2` ({doc['rounds']} interleaved "
                          f"rounds, medians; {sc['shards']} shards): 1 worker {one:,.0f} -> 2 "
                          f"workers {two:,.0f} tokens/s ({sc['speedup']:.2f}x), the same weight "
                          f"bytes: {sc['same_bytes']}"}


def fig_coder_proof(work: Path, quick: bool) -> dict:
    repo = copy_project(ROOT, work / "coder")
    wall, out = _run(repo, sys.executable, "tools/coder_proof.py")
    numbers = coder_figures(out)["bpb"]  # the table's rows, as README's tiny line reads them
    return {"wall_s": round(wall, 1), "bpb": numbers,
            "text": "`make spark-coder-proof`: " + ", ".join(
                f"{k} {v}" for k, v in numbers.items()) + f"; {wall:.0f} s wall on {cpu_label()}"}


def fig_sweep(work: Path, quick: bool) -> dict:
    wall, out = _run(ROOT, sys.executable, "tools/sweep_timing.py")
    doc = load_json(out.strip().splitlines()[-1], "the last line")
    return {"wall_seconds": doc["wall_seconds"], "text": "8-point sweep: " + ", ".join(
        f"{k} {v:.1f} s" for k, v in doc["wall_seconds"].items())}


def fig_tests(work: Path, quick: bool) -> dict:
    """`make test` itself (its pytest workers and options are the Makefile's), so the
    README's count and time are the command a user runs."""
    where = cpu_label()  # the load before the suite adds its own
    wall, out = _run(ROOT, "make", "-s", "--no-print-directory", "test")
    summary = out.strip().splitlines()[-1]
    return {"wall_s": round(wall, 1), "summary": summary,
            "text": f"`make test`: {summary.strip('= ')} ({wall / 60:.1f} min wall on {where})"}


# The figures whose numbers and hashes every run on this machine reproduces (`--stable`):
# what tests/pipeline/test_readme_blocks.py checks against README, rerun after a change
# that moves the default job's bytes.
STABLE = ("run", "tasks", "grid", "spark-sweep")
# name -> (measure, in --quick)
FIGURES = {
    "run": (fig_run, False),
    "tasks": (fig_tasks, False),
    "ci-report": (fig_ci_report, False),
    "grid": (fig_grid, False),
    "spark-sweep": (fig_spark_sweep, False),
    "pipeline": (fig_pipeline, True),
    "scale-proof": (fig_scale_proof, True),
    "bench": (fig_bench, True),
    "workers": (fig_workers, True),
    "coder-proof": (fig_coder_proof, False),
    "coder-tiny": (fig_coder_tiny, False),
    "own-data": (fig_own_data, False),
    "sweep": (fig_sweep, False),
    "tests": (fig_tests, False),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tools/readme_figures.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="only the quick figures, at a tiny budget; README.md untouched")
    p.add_argument("--stable", action="store_true",
                   help=f"only the figures a run reproduces exactly ({', '.join(STABLE)}: "
                        f"minutes), at full budget; rewrites those README blocks and "
                        f"leaves the machine line, record in {STABLE_RECORD.relative_to(ROOT)}")
    p.add_argument("--only", default=None, help="comma-separated figure names "
                                                f"({', '.join(FIGURES)})")
    p.add_argument("--record", default=None, help="where the JSON record goes")
    p.add_argument("--readme", action="append", default=None,
                   help="a page whose blocks to rewrite (repeat it; default: "
                        + ", ".join(str(p.relative_to(ROOT)) for p in PAGES) + ")")
    args = p.parse_args(argv)
    args.record = args.record or str(STABLE_RECORD if args.stable else RECORD)
    if args.stable and (args.quick or args.only):
        print("readme_figures: error: --stable is its own list; drop --quick / --only",
              file=sys.stderr)
        return 2
    names = (list(STABLE) if args.stable else args.only.split(",") if args.only else
             [n for n, (_, q) in FIGURES.items() if q or not args.quick])
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"readme_figures: error: unknown figure {unknown[0]!r}; known: "
              f"{', '.join(FIGURES)}", file=sys.stderr)
        return 2
    record = {"machine": machine(), "quick": args.quick, "figures": {}}
    failed = None
    with tempfile.TemporaryDirectory(prefix="readme-figures-") as tmp:
        for name in names:
            print(f"readme_figures: {name} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                record["figures"][name] = FIGURES[name][0](Path(tmp), args.quick)
            except SystemExit as err:  # a run that failed: keep the figures measured so far
                failed = f"{name}: {err}"
                print(f"readme_figures: {name} FAILED; the figures before it are kept",
                      file=sys.stderr, flush=True)
                break
            print(f"readme_figures: {name} done in {time.perf_counter() - t0:.0f}s",
                  file=sys.stderr, flush=True)
            _save(record, args.record)  # after every figure: a late failure loses nothing
    record["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    _save(record, args.record)
    print(f"wrote {args.record}")
    if not args.quick:
        new = blocks(record)
        if args.stable or args.only:   # the machine line dates the whole set, not these
            del new["machine"]
        for page in args.readme or PAGES:
            text, done = rewrite(Path(page).read_text(), new)
            Path(page).write_text(text)
            print(f"rewrote {page}: {', '.join(done) or 'no blocks'}")
    if failed:
        print(f"readme_figures: error: {failed}", file=sys.stderr)
        return 1
    return 0


def _save(record: dict, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.exit(main())
