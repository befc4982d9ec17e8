"""Spark Train: reproducible numpy training of tiny transformer LMs."""
import os as _os

__version__ = "0.1.0"

# BLAS thread count decides how float sums are split, so it is pinned before
# numpy is first imported anywhere in the package: same inputs, same bytes.
# SPARK_BLAS_THREADS overrides it (the value is recorded in checkpoint.json).
# A value that is not a thread count is reported by the CLI and the stages as one
# line (ENV_ERROR) before any work; until then BLAS runs on 1 thread.
_blas_text = _os.environ.get("SPARK_BLAS_THREADS", "1").strip()
ENV_ERROR = None
BLAS_THREADS = int(_blas_text) if _blas_text.isdigit() and 0 < int(_blas_text) <= 1024 else 0
if not BLAS_THREADS:
    ENV_ERROR = f"SPARK_BLAS_THREADS must be an integer in [1, 1024], got {_blas_text[:40]!r}"
    BLAS_THREADS = 1
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    _os.environ[_var] = str(BLAS_THREADS)


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
