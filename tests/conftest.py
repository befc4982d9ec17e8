"""Puts tests/ on sys.path (pytest's rootdir conftest rule) and shares fixtures."""
import collections
import os
import signal
import sys

import pytest

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


def pytest_collection_modifyitems(config, items):
    """The end-to-end modules first, the rest by their number of tests (most first).

    `make test` hands whole modules to its two workers in this order
    (`--no-loadscope-reorder`), the next to whichever finishes first. pytest-xdist's own
    order (most tests first) left the few-test, minute-long DVC modules to the end, and
    one worker ran the last of them while the other sat idle: 118 s of a 708 s run.
    Longest first, the tail is made of short unit tests that even the two workers out."""
    def module(item):
        return item.nodeid.split("::")[0]
    count = collections.Counter(map(module, items))
    e2e = {module(item) for item in items if item.get_closest_marker("e2e")}
    items.sort(key=lambda item: (module(item) not in e2e, -count[module(item)]))


def pytest_configure(config):
    if not hasattr(config, "workerinput"):   # once, in the process that starts the workers
        compile_code(ROOT)


@pytest.fixture(autouse=True)
def _signal_handlers_as_found():
    """Each test leaves this process's SIGINT and SIGTERM handlers as it found them. A stage
    run in-process and interrupted ignores both while it restores its outputs (exit 130),
    and the CLI raises on SIGTERM; left so, every later test of the worker ran its
    subprocesses with SIGINT ignored (a sweep's Ctrl-C test among them)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        if handler is not None:
            signal.signal(signum, handler)
