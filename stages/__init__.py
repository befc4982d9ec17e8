"""The DVC stage scripts (`python -m stages.X`, docs/pipeline.md).

Importing this package starts the process first (sparktrain/runtime.py: the
BLAS kernel and threads, before any stage module loads numpy); a bad
SPARK_BLAS_KERNEL or SPARK_BLAS_THREADS is one line and exit 2.
"""
import sys

from sparktrain import runtime
from sparktrain.core.errors import SparkError, printable

try:
    runtime.start()
except SparkError as _err:
    sys.stderr.write(f"spark: error: {printable(str(_err))}\n")
    sys.exit(2)
