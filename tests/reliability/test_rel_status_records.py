"""Issue 35 item 4: status / status --summary on forged job records: one typed
check in job_state, never a traceback (1e400, a string for a number, no total_seconds)."""
import json

import pytest

from sparktrain.cli.train import _summary_text
from sparktrain.core.fsutil import canonical_json
from sparktrain.core.values import number
from sparktrain.train import jobstate

CKPT = {"trained": True, "step_n": 3, "loss_before": 2.0, "loss_after": 1.5,
        "weights": "weights.safetensors", "weights_sha256": "ab" * 32}
PERF = {"tokens_per_s": 100.0, "total_seconds": 2.0, "mfu": 0.1}

CASES = [
    ("checkpoint.json", {**CKPT, "loss_after": "1e400"}, '"loss_after": 1e400'),
    ("checkpoint.json", {**CKPT, "loss_before": "x"}, None),
    ("checkpoint.json", {**CKPT, "step_n": "3"}, None),
    ("perf.json", PERF, '"total_seconds": 1e400'),
    ("perf.json", {**PERF, "tokens_per_s": "fast"}, None),
    ("perf.json", {"tokens_per_s": 1.0}, None),
    ("status.json", {"n_params": 1}, '"n_params": 1e400'),
    ("failed.json", {"reason": "x", "lr": 1}, '"lr": 1e400'),
    ("eval.json", {"loss": 1.0}, '"loss": 1e400'),
]


@pytest.mark.parametrize("name,rec,raw", CASES)
def test_forged_record_is_no_traceback(tmp_path, name, rec, raw):
    job = tmp_path / "job"
    job.mkdir()
    (job / "checkpoint.json").write_text(json.dumps(CKPT))
    (job / "perf.json").write_text(json.dumps(PERF))
    text = json.dumps(rec)
    if raw:
        key = raw.split(":")[0]
        text = text.replace(key + ": " + json.dumps(rec[json.loads(key)]), raw)
        assert "1e400" in text
    (job / name).write_text(text)
    state = jobstate.job_state(job)
    json.loads(canonical_json(state))           # valid JSON, no ValueError
    summary = _summary_text(state, job)          # no ValueError / KeyError
    assert summary.startswith("job job:")


def test_number_check():
    assert number(1.5) == 1.5 and number(2) == 2
    for bad in (True, float("inf"), float("nan"), "1", None):
        assert number(bad) is None
