"""The BLAS kernel family: chosen before numpy loads, read back for the record.

OpenBLAS picks its matrix kernels by CPU when it is loaded, and kernels of
different families sum floats in different orders, so they give other bytes
(an AVX-512 machine runs SkylakeX, an AVX2 machine Haswell or Zen). `choose`
runs first thing in every process that imports sparktrain (the package's
__init__, before anything imports numpy) and makes the bytes portable across
x86-64: when OPENBLAS_CORETYPE is unset and the CPU has AVX2 + FMA, it sets it
to Haswell, which every such CPU runs; the environment's own value is kept.
Child processes (gradient workers, DVC stages, sweep points) inherit the
variable. `made_with` reads back the kernel that really runs (threadpoolctl)
with the numpy and BLAS versions; checkpoint.json records it and
`spark repro-check` names it when a hash moves. See docs/portability.md.
"""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass

from sparktrain.errors import SparkError

ENV = "SPARK_BLAS_KERNEL"          # portable (default) | native
MODES = ("portable", "native")
CORETYPE = "OPENBLAS_CORETYPE"     # what OpenBLAS reads when it loads
PORTABLE = "Haswell"               # AVX2 + FMA: every x86-64 CPU since 2013
# Set beside CORETYPE when sparktrain chose it, so a child process can tell our
# choice (inherited) from a value the environment set.
CHOSEN = "SPARK_BLAS_KERNEL_CHOSEN"
X86 = ("x86_64", "amd64", "x86-64")


@dataclass(frozen=True)
class Choice:
    """How this process's kernel was decided. `source` is one of: portable (we
    set Haswell), environment (OPENBLAS_CORETYPE came set), native (opted out),
    preloaded (numpy was loaded before sparktrain), no-avx2, not-x86 (OpenBLAS
    picks the CPU's own family), unknown-cpu (features not readable here)."""
    mode: str
    source: str
    coretype: str | None


def requested_mode(environ=os.environ) -> str:
    value = environ.get(ENV, "").strip().lower() or "portable"
    if value not in MODES:
        raise SparkError(f"{ENV}={environ.get(ENV)!r}: expected one of {', '.join(MODES)}")
    return value


def cpu_has_avx2_fma(cpuinfo: str | None = None) -> bool | None:
    """True/False from /proc/cpuinfo's flags; None where they cannot be read."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
                cpuinfo = fh.read()
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return {"avx2", "fma"} <= flags
    return None


def choose(environ=os.environ, numpy_loaded: bool | None = None,
           machine: str | None = None, cpuinfo: str | None = None) -> Choice:
    """Decide the kernel before numpy loads; sets environ[CORETYPE] in portable mode."""
    mode = requested_mode(environ)
    if numpy_loaded is None:
        numpy_loaded = "numpy" in sys.modules
    given = environ.get(CORETYPE) or None
    if given is not None:
        ours = environ.get(CHOSEN) == given
        return Choice(mode, "portable" if ours else "environment", given)
    if mode == "native":
        return Choice(mode, "native", None)
    if numpy_loaded:
        return Choice(mode, "preloaded", None)
    if (machine or platform.machine()).lower() not in X86:
        return Choice(mode, "not-x86", None)
    has = cpu_has_avx2_fma(cpuinfo)
    if has is None:
        return Choice(mode, "unknown-cpu", None)
    if not has:
        return Choice(mode, "no-avx2", None)
    environ[CORETYPE] = PORTABLE
    environ[CHOSEN] = PORTABLE
    return Choice(mode, "portable", PORTABLE)


def _numpy_blas(info: list[dict]) -> dict | None:
    """numpy's own BLAS among the loaded libraries (another package may bring its own)."""
    blas = [p for p in info if p.get("user_api") == "blas"]
    ours = [p for p in blas if "numpy" in (p.get("filepath") or "").lower()]
    return (ours or blas or [None])[0]


def made_with() -> dict:
    """What made the bytes: the running BLAS kernel family, numpy and BLAS versions.
    The same on every machine that runs the same kernel and packages (no CPU model,
    no path), so it can sit in a hashed output."""
    import numpy
    from threadpoolctl import threadpool_info

    lib = _numpy_blas(threadpool_info())
    if lib is None:
        return {"kernel": "none", "numpy": numpy.__version__, "blas": "none"}
    kernel = lib.get("architecture") or lib.get("threading_layer") or "unknown"
    return {"kernel": str(kernel), "numpy": numpy.__version__,
            "blas": f"{lib.get('internal_api', 'blas')} {lib.get('version') or '?'}"}


def note(choice: Choice, record: dict | None = None) -> str | None:
    """One line when the bytes belong to a family other than the portable one
    for a reason the user did not ask for; None otherwise."""
    if choice.source in ("portable", "environment", "native"):
        return None
    kernel = (record or made_with())["kernel"]
    if choice.source == "preloaded":
        if kernel == PORTABLE:
            return None
        return (f"numpy was loaded before sparktrain, so OpenBLAS chose its "
                f"kernel itself ({kernel}); the bytes follow that kernel (import sparktrain "
                f"first, or set {CORETYPE}={PORTABLE}, for the portable one)")
    why = {"not-x86": f"this CPU is not x86-64 ({platform.machine()})",
           "no-avx2": "this CPU has no AVX2 + FMA",
           "unknown-cpu": "this CPU's features cannot be read here"}[choice.source]
    return (f"{why}, so the portable {PORTABLE} kernel is not used; the "
            f"bytes belong to the {kernel} kernel family")
