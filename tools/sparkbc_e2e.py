"""`spark run` and `dvc repro` give the same weights: the end-to-end proof.

    python -m sparktrain.sparkbc_e2e

Copies the project twice into temporary folders (the files git tracks or would
track, never .venv, out/ or DVC's cache), runs the default program with
`spark run` in one and `dvc repro` in the other, and compares the sha256 of the
two weights.safetensors. Prints both; exit 0 when they match, 1 when they
differ, 2 (one line) when a run cannot be made.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from sparktrain.errors import SparkError
from sparktrain.fsutil import sha256_file

# Left behind by earlier runs or by the environment; never part of a copy.
NOT_COPIED = (".venv/", "out/", ".dvc/cache/", ".dvc/tmp/", "tmp/")
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "spark-e2e", "GIT_AUTHOR_EMAIL": "spark-e2e@localhost",
                "GIT_COMMITTER_NAME": "spark-e2e", "GIT_COMMITTER_EMAIL": "spark-e2e@localhost"}


def tool_env(extra: dict | None = None) -> dict:
    """The environment for dvc and spark: this interpreter's bin first on PATH,
    because the stage commands are `python stages/X.py`."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["DVC_NO_ANALYTICS"] = "1"
    env.update(GIT_IDENTITY)
    env.update(extra or {})
    return env


def project_files(root: Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files, as git lists them."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        raise SparkError(f"{root} is not a git checkout of the project: {listed.stderr.strip()}")
    names = [n for n in listed.stdout.split("\0") if n]
    return sorted(n for n in names
                  if not n.startswith(NOT_COPIED) and (root / n).is_file())


def copy_project(root: Path, dest: Path) -> Path:
    """A fresh one-commit git repository at `dest` holding the project's files."""
    root, dest = Path(root), Path(dest)
    for name in project_files(root):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    git = ["git", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "project copy"]):
        done = subprocess.run(git + args, cwd=dest, env=tool_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise SparkError(f"git {args[0]} in {dest} failed: {done.stderr.strip()}")
    return dest


def _run(cmd: list[str], cwd: Path) -> None:
    # The copy's own package, not the editable install's working tree.
    done = subprocess.run(cmd, cwd=cwd, env=tool_env({"PYTHONPATH": str(cwd)}),
                          capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SparkError(f"`{' '.join(cmd)}` failed (exit {done.returncode}): {last}")


def weights_path(repo: Path) -> Path:
    params = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))
    return repo / "out" / "train" / params["job"] / "weights.safetensors"


def spark_run_weights(root: Path, workdir: Path) -> str:
    repo = copy_project(root, workdir / "spark-run")
    params = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))
    _run(["spark", "run", params["program"]], repo)
    return sha256_file(weights_path(repo))


def dvc_repro_weights(root: Path, workdir: Path) -> str:
    repo = copy_project(root, workdir / "dvc-repro")
    _run(["dvc", "repro"], repo)
    return sha256_file(weights_path(repo))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparktrain.sparkbc_e2e",
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
