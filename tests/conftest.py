"""Puts tests/ on sys.path (pytest's rootdir conftest rule) and shares fixtures."""
from sparkhelp import project  # noqa: F401  (fixture)
