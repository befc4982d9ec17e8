"""A stage never leaves a job with fewer good files than it found (issue 55): DVC removes
the step's outputs before it runs, and whatever stops the stage, a bug included, they
come back from the DVC cache, said in one line."""
from __future__ import annotations

import json

import pytest

from .conftest import dvc, run

pytestmark = pytest.mark.e2e

STEP_FILES = ("weights.safetensors", "checkpoint.json", "ARTIFACT", "dvclive/metrics.json",
              "dvclive/plots/metrics/loss.tsv", "dvclive/plots/metrics/lr.tsv")


def test_an_unexpected_exception_in_step_puts_the_outputs_back(repro_copy):
    folder = repro_copy / "out" / "train" / "job-dry-001"
    before = {n: (folder / n).read_bytes() for n in STEP_FILES}
    # a bug after training, before the commit (the copy's own code runs the stage)
    records = repro_copy / "sparktrain/train/records.py"
    text = records.read_text()
    head = '    """What a run must show before `trained=true` (docs/training.md "The learned-check")."""\n'
    assert text.count(head) == 1
    records.write_text(text.replace(head, head + '    raise IndexError("index 23 is out of '
                                    'bounds for axis 0 with size 3")\n'))
    done = dvc(repro_copy, "repro", check=False)
    assert done.returncode != 0 and "exited with 1" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("stage step: ")]
    assert line.startswith("stage step: internal error: IndexError: index 23 is out of bounds")
    assert "(at records.py:" in line and "restored from the DVC cache" in line, line
    assert {n: (folder / n).read_bytes() for n in STEP_FILES} == before
    state = json.loads(run(repro_copy, "spark", "status", "job-dry-001").stdout)
    assert state["state"] == "trained" and state["weights_verified"] is True
