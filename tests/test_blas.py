"""The BLAS pool is pinned at run time, whoever imported numpy first, and the
records say the pool that really ran (sparktrain/runtime.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sparkhelp import HANG_GUARD_S, assert_one_line_error, run_spark
from sparktrain import runtime

# numpy first, as tools/coder_proof.py did: its BLAS starts with the library's
# own thread count, before sparktrain is imported at all.
NUMPY_FIRST = """
import json
import numpy
from threadpoolctl import threadpool_info

def pool():
    return max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")

before = pool()
from sparktrain.model.config import SCALES
from sparktrain.data.source import source_for
from sparktrain.params import Defaults, StepConfig
from sparktrain.train.job import job_from_program
from sparktrain.train.runner import run_job

job = job_from_program("data/programs/train-step.sparkbc", "job-dry-001")
res = run_job(job, StepConfig(outer=1, inner=2, shards=2, workers=2), SCALES["tiny"],
                       source_for(job.dataset, Defaults()), progress=lambda line: None)
on_disk = json.load(open("out/train/job-dry-001/perf.json"))
print(json.dumps({"before": before, "live": pool(), "checkpoint": res.checkpoint["blas_threads"],
                  "perf": on_disk["blas_threads"], "workers": on_disk["workers"]}))
"""


def _numpy_first(project, **env) -> dict:
    full = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", **env}
    full.pop("SPARK_BLAS_THREADS", None)
    full.update(env)
    done = subprocess.run([sys.executable, "-c", NUMPY_FIRST], cwd=project, env=full,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_numpy_imported_first_still_runs_and_records_one_thread(project):
    got = _numpy_first(project)
    assert got["before"] == 2, "the script must start with a 2-thread pool to prove anything"
    assert got["live"] == 1 and got["checkpoint"] == 1 and got["perf"] == 1
    assert got["workers"] == 2  # the gradient workers still start (one BLAS thread each)


@pytest.mark.slow
def test_spark_blas_threads_is_what_runs_and_what_is_recorded(project):
    got = _numpy_first(project, SPARK_BLAS_THREADS="2", OPENBLAS_NUM_THREADS="1",
                       OMP_NUM_THREADS="1")
    assert got["before"] == 1
    assert got["live"] == 2 and got["checkpoint"] == 2 and got["perf"] == 2


def test_live_threads_reads_the_pool_back():
    from threadpoolctl import threadpool_limits

    assert np.__name__ in sys.modules  # its BLAS is loaded, so there is a pool to read
    assert runtime.live_threads() == 1  # this process imported sparktrain: pinned
    with threadpool_limits(limits=2, user_api="blas"):
        assert runtime.live_threads() == 2
    assert runtime.live_threads() == 1


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5"])
def test_bad_spark_blas_threads_is_one_line(text):
    assert_one_line_error(*run_spark(["--help"], env={"SPARK_BLAS_THREADS": text})[::2],
                          "SPARK_BLAS_THREADS must be a positive integer", repr(text))


def test_requested_threads_reads_the_variable():
    assert runtime.requested_threads({}) == 1
    assert runtime.requested_threads({"SPARK_BLAS_THREADS": " 3 "}) == 3
