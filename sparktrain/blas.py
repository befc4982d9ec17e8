"""The BLAS thread pool: pinned at run time, read back for the record.

The number of BLAS threads decides how a matmul's float sums are split, so it
decides the bytes of a run and, on a busy machine, its speed (threads that
wait on each other's cores). `pin` sets it in two places: the environment
variables, which a BLAS library reads when it is first loaded (numpy not
imported yet, and every child process: gradient workers, DVC stages), and
threadpoolctl, which resizes the pools of the libraries already loaded (numpy
imported before sparktrain). `live_threads` reads the pool back, so
checkpoint.json and perf.json record what ran, not what was asked
(docs/training.md, "Threads and shards").
"""
from __future__ import annotations

import os

from threadpoolctl import threadpool_info, threadpool_limits

from sparktrain.argtypes import env_count

ENV = "SPARK_BLAS_THREADS"
DEFAULT_THREADS = 1
# What the BLAS and OpenMP builds numpy may load read at start-up.
LIBRARY_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def requested_threads(environ=os.environ) -> int:
    """SPARK_BLAS_THREADS, else 1."""
    return env_count(ENV, DEFAULT_THREADS, environ)


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
