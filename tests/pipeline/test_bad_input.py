"""Bad input through the real pipeline: `dvc repro` fails, the failing stage
says what is wrong in one stderr line without a traceback, nothing trains."""
from __future__ import annotations

import re

import pytest

from .conftest import dvc

pytestmark = pytest.mark.e2e

# (id, params.yaml line, its replacement, what the stage's error line must name)
BAD_PARAMS = [
    ("typo-key", "  outer: 4", "  oter: 4", "step.oter"),
    ("wrong-type", "  lr: 0.1", '  lr: "fast"', "step.lr"),
    ("job-not-in-program", "job: job-dry-001", "job: job-nope-002", "job-nope-002"),
    ("job-with-slash", "job: job-dry-001", "job: team/job-dry-001", "team/job-dry-001"),
    ("job-dotdot", "job: job-dry-001", "job: ../job-dry-001", "../job-dry-001"),
]


@pytest.mark.parametrize("line, replacement, named", [case[1:] for case in BAD_PARAMS],
                         ids=[case[0] for case in BAD_PARAMS])
def test_bad_params_fail_in_one_line_before_training(template_copy, line, replacement, named):
    params = template_copy / "params.yaml"
    text = params.read_text()
    assert len(re.findall(rf"^{re.escape(line)}\b", text, flags=re.M)) == 1, line
    params.write_text(re.sub(rf"^{re.escape(line)}\b", replacement, text, flags=re.M))

    done = dvc(template_copy, "repro", check=False)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stdout
    stage_lines = [ln for ln in done.stdout.splitlines() if re.match(r"stage \S+: ", ln)]
    errors = [ln for ln in stage_lines if ": error: " in ln]
    assert len(errors) == 1 and errors == stage_lines[-1:], done.stdout
    assert named in errors[0], errors[0]
    assert "exited with 2" in done.stdout, "a user mistake exits 2"
    assert not list(template_copy.glob("**/weights.safetensors")), "no training may run"
    assert not list(template_copy.glob("**/ARTIFACT"))
