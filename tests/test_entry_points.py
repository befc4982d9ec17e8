"""Every way in runs the process set-up before numpy loads: each console script of the
installed package and each tools/*.py calls `sparktrain.runtime.start()` while numpy is
still unloaded, so the BLAS kernel is the portable one (a tool that skipped it trained
on the machine's native kernel and wrote other bytes into the pipeline's job folder).

Each entry point runs with --help in a fresh interpreter whose `runtime.start` notes
whether numpy was loaded at its first call."""
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from sparkhelp import ROOT

PROBE = """
import importlib, runpy, sys
import sparktrain.runtime as runtime
first, real = [], runtime.start
def start():
    if not first:
        first.append("numpy" in sys.modules)
    return real()
runtime.start = start
kind, target = sys.argv[1:]
sys.argv = [target, "--help"]
try:
    if kind == "tool":
        sys.path.insert(0, str(__import__("pathlib").Path(target).parent))
        runpy.run_path(target, run_name="__main__")
    else:
        module, _, func = target.partition(":")
        getattr(importlib.import_module(module), func)()
except SystemExit:
    pass
except ImportError:   # an optional library (torch) imported after the set-up
    pass
print("numpy loaded at start():", first[0] if first else "start() never called")
"""
SCRIPTS = sorted((ep.name, ep.value) for ep in entry_points(group="console_scripts")
                 if ep.dist is not None and ep.dist.name == "sparktrain")
# every tool a person runs (a module the tools share, such as readme_pages.py, runs nothing)
TOOLS = sorted(p.name for p in (ROOT / "tools").glob("*.py") if "__main__" in p.read_text())


def probe(kind: str, target: str) -> str:
    p = subprocess.run([sys.executable, "-c", PROBE, kind, target], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("numpy loaded at start():")]
    assert lines, p.stdout[-2000:] + p.stderr[-2000:]
    return lines[-1].partition(":")[2].strip()


def test_the_package_has_both_console_scripts():
    assert [name for name, _ in SCRIPTS] == ["spark", "spark-code"]


@pytest.mark.parametrize("name,target", SCRIPTS)
def test_console_script_starts_the_process_first(name, target):
    assert probe("script", target) == "False", name


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_starts_the_process_first(tool):
    assert probe("tool", str(ROOT / "tools" / tool)) == "False", tool
