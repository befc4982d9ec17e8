"""requirements.lock pins the default install exactly (`make setup` installs with
it, `make lock` refreshes it), and the venv runs the numpy it pins: another numpy
and its OpenBLAS may move the bytes (docs/portability.md)."""
from __future__ import annotations

import os
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"


def locked() -> list[Requirement]:
    lines = [ln.strip() for ln in LOCK.read_text().splitlines()]
    return [Requirement(ln) for ln in lines if ln and not ln.startswith("#")]


def pins_here() -> dict[str, str]:
    """name -> version for this interpreter (the lock forks by Python version)."""
    found = {}
    for req in locked():
        if req.marker is None or req.marker.evaluate():
            found[canonicalize_name(req.name)] = str(req.specifier)
    return found


def test_every_line_is_an_exact_pin():
    reqs = locked()
    assert reqs, "requirements.lock is empty"
    for req in reqs:
        [spec] = req.specifier
        assert spec.operator == "==", str(req)


def test_the_lock_covers_the_default_install_and_its_extras_dev_and_sweep():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + [d for extra in ("dev", "sweep")
                                        for d in project["optional-dependencies"][extra]]
    pins = pins_here()
    for dep in wanted:
        req = Requirement(dep)
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} is not in requirements.lock: run `make lock`"
        assert req.specifier.contains(pins[name].lstrip("="), prereleases=True), \
            f"{name}{pins[name]} breaks pyproject's {dep}: run `make lock`"
    assert "torch" not in pins  # the hf and gpu extras stay unpinned


def test_the_venv_runs_the_locked_numpy():
    pins = pins_here()
    assert "numpy" in pins
    assert f"=={version('numpy')}" == pins["numpy"], (
        f"this venv has numpy {version('numpy')}, requirements.lock pins {pins['numpy']}: "
        f"the bytes may move; run `make setup`")


@pytest.mark.parametrize("name", ["dvc", "safetensors", "threadpoolctl", "pydantic"])
def test_the_venv_runs_the_locked_versions_of_what_records_and_hashes(name):
    try:
        have = version(name)
    except PackageNotFoundError:
        pytest.fail(f"{name} is not installed")
    assert f"=={have}" == pins_here()[canonicalize_name(name)]


def test_make_test_runs_on_xdist_workers_that_the_dev_extra_installs():
    """`make test` spreads the suite over pytest-xdist workers; the dev extra (which
    `make setup` installs) and the lock carry pytest-xdist, so a fresh clone has it."""
    import subprocess

    # Under `make test` itself this is a sub-make: drop what the outer make hands down
    # (MAKEFLAGS, MAKELEVEL make it print "Entering directory" lines) and any
    # TEST_WORKERS the caller chose, so the default is what is read.
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TEST_WORKERS")}
    make = ["make", "--no-print-directory", "-n", "test", "STAMP="]
    shown = subprocess.run(make, cwd=ROOT, capture_output=True, env=env,
                           text=True, check=True).stdout.strip().splitlines()
    assert shown[-1].endswith("-m pytest -q -n 2 --dist loadscope --no-loadscope-reorder --durations=10"), shown
    one = subprocess.run(make + ["TEST_WORKERS=0"], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "-n 0 " in one, one
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert "pytest-xdist" in {canonicalize_name(Requirement(r).name) for r in dev}
    assert "pytest-xdist" in pins_here() and "execnet" in pins_here()
