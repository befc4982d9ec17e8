"""Spark Train: reproducible numpy training of tiny transformer LMs."""
import os as _os

__version__ = "0.1.0"

# BLAS thread count decides how float sums are split, so it is pinned before
# numpy is first imported anywhere in the package: same inputs, same bytes.
# SPARK_BLAS_THREADS overrides it (the value is recorded in checkpoint.json).
BLAS_THREADS = int(_os.environ.get("SPARK_BLAS_THREADS", "1"))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    _os.environ[_var] = str(BLAS_THREADS)
