"""Puts tests/ on sys.path (pytest's rootdir conftest rule) and shares fixtures."""
import os
import sys

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
from sparkhelp import ROOT, compile_code, project  # noqa: F401  (fixture)

# The suite starts a few thousand Python processes (spark, dvc, the stages). A machine
# or shell that sets PYTHONDONTWRITEBYTECODE makes each of them compile every module of
# the package it imports from source again (0.3 s of a stage's 0.8 s here); a user's
# machine caches them. The tests run as on a user's machine: byte code is cached, in
# __pycache__ folders, which git and DVC ignore.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_configure(config):
    if not hasattr(config, "workerinput"):   # once, in the process that starts the workers
        compile_code(ROOT)
