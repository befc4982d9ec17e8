"""A stage never leaves a job with fewer good files than it found (issue 55): DVC removes
the step's outputs before it runs, and whatever stops the stage (a bug, a held-out split
too short for one window) they come back from the DVC cache, said in one line."""
from __future__ import annotations

import json

import pytest
import yaml

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
    ref = 'docs/training.md "Data sources and the one loop"'
    head = f'    """What a run must show before `trained=true` ({ref}: the learned-check)."""\n'
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


# at this corpus.heldout none of the tiny corpus's top-level files is held out, and this
# one is (the split hashes each file's path): a 35-byte held-out split
SHORT_FILE, FRACTION = "short_299.py", 0.002


def test_a_heldout_split_too_short_for_a_window_keeps_the_trained_job(template_copy):
    """dvc repro over a trained corpus job whose held-out split became one 35-byte file:
    refused before training in one line naming its size and what to change (it was an
    IndexError), and the job keeps its trained model."""
    repo = template_copy
    p = yaml.safe_load((repo / "params.yaml").read_text())
    p.update(job="job-coder-tiny", program="data/programs/train-coder.sparkbc", scale="tiny")
    p["step"].update(outer=2, inner=2, lr=0.05, batch_size=4)
    p["corpus"] = dict(p["corpus"], glob="*.py")
    (repo / "params.yaml").write_text(yaml.safe_dump(p))
    dvc(repo, "repro")
    folder = repo / "out" / "train" / "job-coder-tiny"
    before = {n: (folder / n).read_bytes() for n in STEP_FILES}

    (repo / "data/corpus/tiny" / SHORT_FILE).write_text("def f():\n    return 'a short file'\n")
    p["corpus"]["heldout"] = FRACTION
    (repo / "params.yaml").write_text(yaml.safe_dump(p))
    done = dvc(repo, "repro", check=False)
    assert done.returncode != 0 and "exited with 2" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout and "IndexError" not in done.stdout
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("stage step: ")]
    assert "the held-out split is too short for one context window" in line, line
    assert "(35 bytes in 1 file(s))" in line and "corpus.heldout" in line, line
    assert "restored from the DVC cache" in line, line
    assert {n: (folder / n).read_bytes() for n in STEP_FILES} == before
    state = json.loads(run(repo, "spark", "status", "job-coder-tiny").stdout)
    assert state["state"] == "trained" and state["weights_verified"] is True
