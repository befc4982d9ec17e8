"""The default pairs job with a BPE through the real DVC pipeline:
`dvc exp run -S tokenizer=bpe -S vocab_size=300`."""
from __future__ import annotations

import json

import pytest

from sparktrain.core.fsutil import sha256_file

from .conftest import dvc, dvc_json, ran_stages

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_default_pairs_job_with_a_bpe_tokenizer(repro_copy):
    repo = repro_copy
    done = dvc(repo, "exp", "run", "-n", "pairs-bpe", "-S", "tokenizer=bpe",
               "-S", "vocab_size=300")
    # the tokenizer is trained on the training JSONL; step and eval read it
    assert {"tokenizer", "step", "eval"} <= ran_stages(done.stdout), done.stdout
    folder = repo / "out/train/job-dry-001"
    ck = json.loads((folder / "checkpoint.json").read_text())
    assert ck["tokenizer"] == "bpe" and 256 < ck["arch"]["vocab"] <= 300
    assert ck["tokenizer_sha256"] == sha256_file(folder / "tokenizer.json")
    assert ck["loss_after"] < ck["loss_before"]
    rows = dvc_json(repo, "exp", "show")
    exps = {e["name"]: e for r in rows for e in (r.get("experiments") or [])
            for e in [e["revs"][0]] if e.get("name")}
    metrics = exps["pairs-bpe"]["data"]["metrics"]
    ev = next(v["data"] for k, v in metrics.items() if k.endswith("eval.json"))
    assert 0 < ev["bpb"] and ev["loss"] > 0 and 0 <= ev["exact_match"] <= 1
