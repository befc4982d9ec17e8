"""Loaded (through PYTHONPATH) into every Python process of a traced `dvc repro`.

Records, for the process, every file it opened for reading (the "open" audit
event) and every module it imported (`sys.modules` at exit), as JSON in
$SPARK_TRACE_DIR/<pid>.json, with sys.argv so the test can tell which stage
the process was. Only the test suite uses it (tests/pipeline/test_deps.py).
"""
import atexit
import json
import os
import sys

_DIR = os.environ.get("SPARK_TRACE_DIR")
_opened: set[str] = set()


def _on_event(event, args):
    if event != "open" or not args:
        return
    path, mode = args[0], args[1] if len(args) > 1 else "r"
    if isinstance(path, int):
        return
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return
    flags = args[2] if len(args) > 2 else 0
    if isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
        return
    try:
        _opened.add(os.path.abspath(os.fsdecode(path)))
    except (TypeError, ValueError):
        pass


def _dump():
    modules = sorted({os.path.abspath(m.__file__) for m in list(sys.modules.values())
                      if getattr(m, "__file__", None)})
    record = {"argv": list(sys.argv), "cwd": os.getcwd(), "modules": modules,
              "opened": sorted(_opened)}
    with open(os.path.join(_DIR, f"{os.getpid()}.json"), "w") as f:
        json.dump(record, f)


if _DIR:
    sys.addaudithook(_on_event)
    atexit.register(_dump)
