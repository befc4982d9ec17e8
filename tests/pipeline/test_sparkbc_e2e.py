"""`spark run` of the default program and `dvc repro` write the same weights."""
from __future__ import annotations

import re
import sys

import pytest

from .conftest import REPO, run

pytestmark = pytest.mark.e2e


def test_spark_run_and_dvc_repro_write_the_same_weights():
    done = run(REPO, sys.executable, str(REPO / "tools" / "sparkbc_e2e.py"), "--root", str(REPO))
    assert done.returncode == 0, done.stdout
    shas = re.findall(r"sha256 ([0-9a-f]{64})", done.stdout)
    assert len(shas) == 2 and shas[0] == shas[1], done.stdout
