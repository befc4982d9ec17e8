"""Dask preload of `spark sweep`'s LocalCluster workers: SIGINT back to the system's default.

Ctrl-C reaches every process of the terminal's group. Python turns it into a
KeyboardInterrupt, which a Dask worker prints as a traceback of its own (one per worker,
dozens of lines, before `spark sweep` says "spark: interrupted"). With the default action
the worker just ends, silently; the `dvc exp run` it started gets the same Ctrl-C and
stops as it would from a shell. The sweep's own process keeps Python's handler, closes
the cluster and says it in one line (docs/pipeline.md "Hostile inputs").
"""
import signal


def dask_setup(worker) -> None:
    """Run by Dask in each worker process's main thread before it takes tasks."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
