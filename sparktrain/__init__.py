"""Spark Train: reproducible numpy training of tiny transformer LMs."""
import sys as _sys

from sparktrain import kernel as _kernel  # first: it picks the BLAS kernel before numpy loads
from sparktrain.errors import SparkError as _SparkError

# The BLAS kernel family decides the bytes of every matmul: portable (Haswell on
# any x86-64 CPU with AVX2 + FMA) unless OPENBLAS_CORETYPE is set or
# SPARK_BLAS_KERNEL=native (sparktrain/kernel.py, docs/portability.md).
try:
    BLAS_KERNEL = _kernel.choose()
except _SparkError as _err:  # one line, exit 2, like the thread count below
    _sys.stderr.write(f"spark: error: {_err}\n")
    raise SystemExit(2) from None
if BLAS_KERNEL.source == "preloaded":  # only a script that imported numpy first gets here
    _line = _kernel.note(BLAS_KERNEL)
    if _line:
        _sys.stderr.write(f"spark: note: {_line}\n")

from sparktrain import blas as _blas  # noqa: E402  (after the kernel: it loads threadpoolctl)

__version__ = "0.1.0"

# BLAS thread count decides how float sums are split, so every process that
# imports the package runs BLAS on SPARK_BLAS_THREADS threads (default 1), set
# at run time whether numpy was imported first or not (sparktrain/blas.py);
# checkpoint.json and perf.json record the pool read back (blas.live_threads).
try:
    BLAS_THREADS = _blas.pin(_blas.requested_threads())
except _SparkError as _err:  # every entry point imports the package: one line, exit 2
    _sys.stderr.write(f"spark: error: {_err}\n")
    raise SystemExit(2) from None


def _keep_freed_memory() -> None:
    """Let glibc keep freed blocks instead of unmapping them.

    A training step allocates and frees tens of MB of activations. By default
    glibc serves each large array with a fresh mmap and unmaps it when freed,
    so every step pays page faults on first touch (about a quarter of the
    large-scale step time here). Raising the mmap and trim thresholds makes
    later steps reuse the same pages. No effect on results; no-op off glibc.
    """
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 512 * 1024 * 1024)
        libc.mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024)
    except (OSError, AttributeError):
        pass


_keep_freed_memory()
