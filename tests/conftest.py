"""Puts tests/ on sys.path (pytest's rootdir conftest rule) and shares fixtures."""
from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
from sparkhelp import project  # noqa: F401  (fixture)
