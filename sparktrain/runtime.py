"""The process set-up every entry point runs before numpy loads: `start()` (the kernel:
docs/portability.md; the threads: docs/portability.md, "Threads and shards"), and the counts
the environment sets (`env_count`: SPARK_BLAS_THREADS here, SPARK_WORKERS for the workers)."""
from __future__ import annotations

import functools
import os
import platform
import sys
from dataclasses import dataclass

from threadpoolctl import threadpool_info, threadpool_limits

from sparktrain.core.errors import SparkError

KERNEL_ENV = "SPARK_BLAS_KERNEL"          # portable (default) | native
MODES = ("portable", "native")
CORETYPE = "OPENBLAS_CORETYPE"     # what OpenBLAS reads when it loads
PORTABLE = "Haswell"               # AVX2 + FMA: every x86-64 CPU since 2013
# Set beside CORETYPE when sparktrain chose it, so a child process can tell our
# choice (inherited) from a value the environment set.
CHOSEN = "SPARK_BLAS_KERNEL_CHOSEN"
X86 = ("x86_64", "amd64", "x86-64")
THREADS_ENV = "SPARK_BLAS_THREADS"
DEFAULT_THREADS = 1
MAX_THREADS = 1024  # like SPARK_WORKERS: no machine we run on has more cores
WORKERS_ENV = "SPARK_WORKERS"   # the gradient engine's worker processes (model/parallel.py)
MAX_WORKERS = 1024   # processes; each is a spawned interpreter
# What the BLAS and OpenMP builds numpy may load read at start-up.
LIBRARY_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


@dataclass(frozen=True)
class Choice:
    """How this process's kernel was decided; `source` is one of portable, environment,
    native, preloaded, no-avx2, not-x86, unknown-cpu (docs/portability.md's table)."""
    mode: str
    source: str
    coretype: str | None


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
            return {"avx2", "fma"} <= set(line.partition(":")[2].split())
    return None


def choose(environ=os.environ, numpy_loaded: bool | None = None,
           machine: str | None = None, cpuinfo: str | None = None) -> Choice:
    """Decide the kernel before numpy loads; sets environ[CORETYPE] in portable mode."""
    mode = environ.get(KERNEL_ENV, "").strip().lower() or "portable"
    if mode not in MODES:
        raise SparkError(f"{KERNEL_ENV}={environ.get(KERNEL_ENV)!r}: expected one of "
                         f"{', '.join(MODES)}")
    given = environ.get(CORETYPE) or None
    if given is not None:
        return Choice(mode, "portable" if environ.get(CHOSEN) == given else "environment", given)
    if mode == "native":
        return Choice(mode, "native", None)
    if numpy_loaded is None:
        numpy_loaded = "numpy" in sys.modules
    if numpy_loaded:
        return Choice(mode, "preloaded", None)
    if (machine or platform.machine()).lower() not in X86:
        return Choice(mode, "not-x86", None)
    has = cpu_has_avx2_fma(cpuinfo)
    if not has:
        return Choice(mode, "unknown-cpu" if has is None else "no-avx2", None)
    environ[CORETYPE] = environ[CHOSEN] = PORTABLE
    return Choice(mode, "portable", PORTABLE)


def made_with() -> dict:
    """What made the bytes: the running BLAS kernel family, numpy and BLAS versions (no
    CPU model, no path: the same wherever the same kernel runs, so it can be hashed)."""
    import numpy

    blas = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    ours = [p for p in blas if "numpy" in (p.get("filepath") or "").lower()]
    lib = (ours or blas or [None])[0]  # numpy's own BLAS (another package may bring its own)
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


def env_count(name: str, default, environ=os.environ, most: int | None = None):
    """A positive integer (at most `most`) from environment variable `name`, `default` (or
    its call) when unset or blank, else one line naming the variable."""
    text = environ.get(name, "").strip()
    if not text:
        return default() if callable(default) else default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SparkError(f"{name} must be a positive integer, got {text[:40]!r}")
    if most is not None and value > most:
        raise SparkError(f"{name}={value:,} is above the limit of {most:,}")
    return value


def requested_threads(environ=os.environ) -> int:
    """SPARK_BLAS_THREADS, else 1."""
    return env_count(THREADS_ENV, DEFAULT_THREADS, environ, most=MAX_THREADS)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers() -> int:
    """SPARK_WORKERS, else the cores this process may run on."""
    return env_count(WORKERS_ENV, usable_cores, most=MAX_WORKERS)


def pin(threads: int) -> int:
    """Run BLAS on `threads` threads in this process and in the processes it starts."""
    for var in LIBRARY_ENV:
        os.environ[var] = str(threads)
    threadpool_limits(limits=threads, user_api="blas")
    return threads


def live_threads() -> int:
    """The threads the loaded BLAS runs on now (the largest pool, if several are
    loaded); the requested count when no BLAS is loaded yet."""
    pools = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    return max(pools) if pools else requested_threads()


def _keep_freed_memory() -> None:
    """glibc keeps freed blocks (mmap and trim thresholds raised), so a training step
    reuses its pages instead of faulting fresh ones; no effect on results, no-op off glibc."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 512 * 1024 * 1024)
        libc.mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024)
    except (OSError, AttributeError):
        pass


@functools.cache
def start() -> Choice:
    """Choose the kernel, pin the threads, keep freed memory; once per process (a later
    call returns the first answer: how this process's kernel was decided). Call it before
    anything imports numpy; a script that loaded numpy first still gets its threads pinned,
    and a note when the kernel is not the portable one. A bad SPARK_BLAS_KERNEL /
    SPARK_BLAS_THREADS: SparkError."""
    kernel = choose()
    line = note(kernel) if kernel.source == "preloaded" else None
    if line:
        sys.stderr.write(f"spark: note: {line}\n")
    pin(requested_threads())
    _keep_freed_memory()
    return kernel
