"""Puts tests/ on sys.path (pytest's rootdir conftest rule) and shares fixtures."""
import sparktrain  # noqa: F401  (first: it pins BLAS threads before numpy loads)
from sparkhelp import project  # noqa: F401  (fixture)
