"""A sharded job through the real pipeline: the step stage's spawned workers run under
`dvc repro`, and 1 or 2 of them (SPARK_WORKERS) give the same output hashes."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from .conftest import dvc, lock_outs, ran_stages, tool_env

pytestmark = pytest.mark.e2e

JOB = "out/train/job-dry-001"


def test_workers_do_not_change_the_outputs_of_a_sharded_job(repro_copy):
    params = repro_copy / "params.yaml"
    text = params.read_text()
    assert len(re.findall(r"^  shards: 1\b", text, flags=re.M)) == 1
    params.write_text(re.sub(r"^  shards: 1\b", "  shards: 2", text, flags=re.M))
    default_lock = lock_outs(yaml.safe_load((repro_copy / "dvc.lock").read_text()))

    locks, perfs = {}, {}
    for workers in ("1", "2"):
        done = dvc(repro_copy, "repro", "--force", "--single-item", "step",
                   env=tool_env(repro_copy, {"SPARK_WORKERS": workers}))
        assert ran_stages(done.stdout) == {"step"}, done.stdout
        assert "Traceback" not in done.stdout
        locks[workers] = lock_outs(yaml.safe_load((repro_copy / "dvc.lock").read_text()))
        perfs[workers] = json.loads((repro_copy / JOB / "perf.json").read_text())
    assert locks["1"] == locks["2"]
    weights = f"{JOB}/weights.safetensors"
    assert locks["2"][weights] != default_lock[weights], "2 shards are a different sum"
    assert (perfs["1"]["workers"], perfs["2"]["workers"]) == (1, 2)
    assert json.loads((repro_copy / JOB / "checkpoint.json").read_text())["shards"] == 2
