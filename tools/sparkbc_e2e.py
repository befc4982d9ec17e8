"""`spark run` and `dvc repro` give the same weights: the end-to-end proof.

    python tools/sparkbc_e2e.py      (make sparkbc-e2e)

Copies the project twice into temporary folders (the files git tracks or would
track, never .venv, out/ or DVC's cache), runs the default program with
`spark run` in one and `dvc repro` in the other, and compares the sha256 of the
two weights.safetensors. Prints both; exit 0 when they match, 1 when they
differ, 2 (one line) when a run cannot be made.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path


from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import sha256_file
from sparktrain.core.jobfiles import PARAMS_FILE, WEIGHTS, job_dir
from sparktrain.repro.toolenv import copy_project, tool_env
from sparktrain.core.safeload import load_yaml

def _run(cmd: list[str], cwd: Path) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=tool_env(cwd),
                          capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SparkError(f"`{' '.join(cmd)}` failed (exit {done.returncode}): {last}")


def weights_path(repo: Path) -> Path:
    params = load_yaml((repo / PARAMS_FILE).read_bytes(), PARAMS_FILE)
    return job_dir(params["job"], repo) / WEIGHTS


def spark_run_weights(root: Path, workdir: Path) -> str:
    repo = copy_project(root, workdir / "spark-run")
    params = load_yaml((repo / PARAMS_FILE).read_bytes(), PARAMS_FILE)
    _run(["spark", "run", params["program"]], repo)
    return sha256_file(weights_path(repo))


def dvc_repro_weights(root: Path, workdir: Path) -> str:
    repo = copy_project(root, workdir / "dvc-repro")
    _run(["dvc", "repro"], repo)
    return sha256_file(weights_path(repo))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/sparkbc_e2e.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="the project checkout to copy (default: the current folder)")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="sparkbc-e2e-") as tmp:
            by_spark = spark_run_weights(args.root, Path(tmp))
            by_dvc = dvc_repro_weights(args.root, Path(tmp))
    except SparkError as err:
        print(f"sparkbc-e2e: error: {err}", file=sys.stderr)
        return 2
    print(f"spark run  weights.safetensors sha256 {by_spark}")
    print(f"dvc repro  weights.safetensors sha256 {by_dvc}")
    if by_spark != by_dvc:
        print("sparkbc-e2e: FAIL: spark run and dvc repro wrote different weights")
        return 1
    print("sparkbc-e2e: ok: same weights bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
