"""Wall time of one grid through `dvc queue -j 1`, `dvc queue -j 2` and `spark sweep`.

Each way runs in a fresh copy of the project (its own DVC cache, so no way
reuses another's run cache) with a bare git repository and a local folder as
the remotes, the set-up tests/pipeline/test_sweep.py uses.

    .venv/bin/python tools/sweep_timing.py [-S step.lr=0.02,0.05,0.1,0.2 -S step.seed=0,1]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
from sparktrain.repro.toolenv import copy_project, tool_env

ROOT = Path(__file__).resolve().parents[1]
GRID = ["step.lr=0.02,0.05,0.1,0.2", "step.seed=0,1"]


def sh(repo: Path, *cmd: str, quiet: bool = False) -> None:
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    done = subprocess.run(list(cmd), cwd=repo, env=tool_env(repo), stdout=out,
                          stderr=subprocess.STDOUT if not quiet else subprocess.DEVNULL, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {repo}:\n{done.stdout or ''}")


def shared_copy(root: Path, name: str) -> Path:
    repo = copy_project(ROOT, root / name)
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main",
                    str(root / f"{name}-origin.git")], check=True)
    sh(repo, "dvc", "remote", "add", "-d", "store", str(root / f"{name}-dvc"))
    sh(repo, "git", "commit", "-q", "-am", "remotes")
    sh(repo, "git", "remote", "add", "origin", str(root / f"{name}-origin.git"))
    sh(repo, "git", "push", "-q", "origin", "main")
    return repo


def queue(repo: Path, grid: list[str], jobs: int) -> float:
    sh(repo, "dvc", "exp", "run", "--queue", *[a for g in grid for a in ("-S", g)])
    t0 = time.perf_counter()
    sh(repo, "dvc", "queue", "start", "-j", str(jobs), quiet=True)
    while True:
        status = subprocess.run(["dvc", "queue", "status"], cwd=repo, env=tool_env(repo),
                                capture_output=True, text=True).stdout
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(0.5)
    seconds = time.perf_counter() - t0
    if "Failed" in status:
        sys.exit(f"a queued point failed:\n{status}")
    return seconds


def sweep(repo: Path, grid: list[str], workers: int) -> float:
    t0 = time.perf_counter()
    sh(repo, sys.executable, "-m", "sparktrain.cli", "sweep",
       *[a for g in grid for a in ("-S", g)], "--workers", str(workers))
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-S", dest="grid", action="append", default=None)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    grid = args.grid or GRID
    results = {}
    with tempfile.TemporaryDirectory(prefix="sweep-timing-") as tmp:
        root = Path(tmp)
        for label, run in (("dvc queue -j 1", lambda r: queue(r, grid, 1)),
                           (f"dvc queue -j {args.workers}", lambda r: queue(r, grid, args.workers)),
                           (f"spark sweep, LocalCluster {args.workers} workers",
                            lambda r: sweep(r, grid, args.workers))):
            repo = shared_copy(root, f"p{len(results)}")
            results[label] = round(run(repo), 1)
            print(f"{label:40s} {results[label]:7.1f} s", flush=True)
    print(json.dumps({"grid": grid, "wall_seconds": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
