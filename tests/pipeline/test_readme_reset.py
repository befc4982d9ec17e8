"""README's reset line ("Change a parameter") puts the default job's outputs back and
keeps another job's model: after the coder job's DVC run, a bare `dvc checkout` deleted
out/train/job-coder-tiny/ and the next `spark generate` had nothing to load."""
from __future__ import annotations

import re

import pytest

from .conftest import REPO, dvc, git, run

RESET = re.compile(r"git checkout params\.yaml dvc\.lock && dvc checkout[^`&\n]*")
OTHER = "out/train/job-scale-001/weights.safetensors"   # another program's job


def reset_lines() -> list[str]:
    return [m.group(0).strip() for m in RESET.finditer((REPO / "README.md").read_text())]


def test_every_reset_line_names_the_pipeline():
    lines = reset_lines()
    assert lines, "README has no reset line"
    assert set(lines) == {"git checkout params.yaml dvc.lock && dvc checkout dvc.yaml"}, lines


@pytest.mark.e2e
def test_the_reset_line_keeps_another_jobs_model(repro_copy):
    git(repro_copy, "add", "-A")
    git(repro_copy, "commit", "-q", "--allow-empty", "-m", "make run")
    params = repro_copy / "params.yaml"
    params.write_text(params.read_text()
                      .replace("job: job-dry-001", "job: job-scale-001", 1)
                      .replace("data/programs/train-step.sparkbc",
                               "data/programs/train-scale.sparkbc", 1)
                      .replace("  outer: 4 ", "  outer: 1 ", 1)
                      .replace("  lr: 0.03 ", "  lr: 0.1 ", 1))
    dvc(repro_copy, "repro")
    scale = {name: (repro_copy / name).read_text() for name in ("params.yaml", "dvc.lock")}
    model = (repro_copy / OTHER).read_bytes()
    done = run(repro_copy, "bash", "-e", "-c", reset_lines()[0])
    assert done.returncode == 0, done.stdout
    assert (repro_copy / OTHER).read_bytes() == model, "the other job's model is kept"
    assert (repro_copy / "out/train/job-dry-001/weights.safetensors").is_file()
    assert dvc(repro_copy, "status", "-q", check=False).returncode == 0
    # the control: the bare line, from the same state, deletes it (why README names dvc.yaml)
    for name, text in scale.items():
        (repro_copy / name).write_text(text)
    dvc(repro_copy, "checkout")
    done = run(repro_copy, "bash", "-e", "-c",
               "git checkout params.yaml dvc.lock && dvc checkout")
    assert done.returncode == 0, done.stdout
    assert not (repro_copy / OTHER).exists()
