"""The DVC stage scripts (`python3 -m stages.X`, docs/pipeline.md).

dvc.yaml runs `python3 -m stages.X`, so a stage runs on whichever `python3` is
first on PATH (`python3`, not `python`: Debian, Ubuntu and macOS have no
`python` unless a venv is activated, and every Unix Python has `python3`): with
`.venv/bin/dvc repro` and the venv not activated, that is the system's, without
numpy or threadpoolctl. So this package first checks
that the running interpreter has the project installed (the `sparktrain`
distribution and every distribution it requires); when it has not, it runs the
same command again with the checkout's `.venv/bin/python` (for `dvc queue` /
`dvc exp run --temp`, whose workspace sits under the repository's
.dvc/tmp/exps/, the repository's), or stops in one line saying how (exit 2).

Then it starts the process (sparktrain/runtime.py: the BLAS kernel and
threads, before any stage module loads numpy); a bad SPARK_BLAS_KERNEL or
SPARK_BLAS_THREADS is one line and exit 2.
"""
import os
import sys
from importlib import metadata
from pathlib import Path

# Set on the re-run, so an interpreter that still lacks the project stops
# instead of running itself again.
REEXEC_ENV = "SPARK_STAGE_REEXEC"
CHECKOUT = Path(__file__).resolve().parent.parent


def _requirement_name(req: str) -> str | None:
    """The distribution a requirement line names; None for an extra's line."""
    if "extra ==" in req.partition(";")[2]:
        return None
    name = req.split(";")[0].strip()
    for stop in "<>=!~[ (":
        name = name.split(stop)[0]
    return name or None


def missing_dependencies() -> list[str]:
    """The project's distributions this interpreter cannot import (empty: all there)."""
    try:
        required = metadata.requires("sparktrain") or []
    except metadata.PackageNotFoundError:
        return ["sparktrain"]
    missing = []
    for name in filter(None, map(_requirement_name, required)):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def project_python(checkout: Path = CHECKOUT) -> Path | None:
    """The checkout's .venv interpreter, or the one of the repository whose
    .dvc/tmp/exps/ holds this checkout (a queued or --temp experiment)."""
    bindir = "Scripts" if os.name == "nt" else "bin"
    exe = "python.exe" if os.name == "nt" else "python"
    for root in (checkout, *checkout.parents):
        python = root / ".venv" / bindir / exe
        if root == checkout or (root / ".dvc" / "tmp" / "exps") in checkout.parents:
            if python.is_file():
                return python
    return None


def _use_project_python() -> None:
    missing = missing_dependencies()
    if not missing:
        return
    python = project_python()
    # Only `python3 -m stages.X` is re-run (argv[0] is "-m" while the package loads).
    if python is not None and REEXEC_ENV not in os.environ and sys.argv[:1] == ["-m"]:
        os.environ[REEXEC_ENV] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(python, [str(python), *sys.orig_argv[1:]])
    how = (f"{python} lacks them too; reinstall it with `make setup`" if python is not None
           else "run `make setup` to create .venv, then run dvc as .venv/bin/dvc")
    sys.stderr.write(f"spark: error: the stage's python ({sys.executable}) lacks the "
                     f"project's dependencies ({', '.join(missing)}); {how}, or activate "
                     f"the venv that has them\n")
    sys.exit(2)


_use_project_python()

from sparktrain import runtime  # noqa: E402  (after the interpreter check)
from sparktrain.core.errors import SparkError, printable  # noqa: E402

try:
    runtime.start()
except SparkError as _err:
    sys.stderr.write(f"spark: error: {printable(str(_err))}\n")
    sys.exit(2)
