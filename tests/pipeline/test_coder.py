"""The tiny coder job (byte tokens, data/corpus/tiny) through the real DVC pipeline,
and a tokenizer sweep with `dvc exp run -S tokenizer=...`."""
from __future__ import annotations

import json

import pytest

from .conftest import dvc, dvc_json, exp_revs, run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CODER = ["-S", "job=job-coder-tiny", "-S", "program=data/programs/train-coder.sparkbc",
         "-S", "step.outer=2", "-S", "step.inner=4", "-S", "step.batch_size=4",
         "-S", "step.lr=0.1",         # 8 short steps: the rate that learns in them
         "-S", 'corpus.glob="*.py"']  # the twenty top-level modules, not more/


def test_coder_job_and_tokenizer_sweep(repro_copy):
    repo = repro_copy
    dvc(repo, "exp", "run", "-n", "coder-byte", *CODER)
    folder = repo / "out/train/job-coder-tiny"
    ck = json.loads((folder / "checkpoint.json").read_text())
    assert ck["dataset_kind"] == "corpus" and ck["tokenizer"] == "byte"
    assert (folder / "corpus/train.bin").stat().st_size == ck["corpus"]["train_tokens"]
    assert ck["loss_curve"][-1]["heldout_bpb"] < ck["loss_curve"][0]["heldout_bpb"]
    dvc(repo, "exp", "run", "-n", "coder-bpe", *CODER, "-S", "tokenizer=bpe",
        "-S", "vocab_size=512")
    bpe = json.loads((folder / "checkpoint.json").read_text())
    assert bpe["tokenizer"] == "bpe" and bpe["arch"]["vocab"] == 512
    rows = dvc_json(repo, "exp", "show")
    exps = {e["name"]: e for e in exp_revs(rows) if e.get("name")}
    assert {"coder-byte", "coder-bpe"} <= set(exps)
    bpbs = {}
    for name in ("coder-byte", "coder-bpe"):
        metrics = exps[name]["data"]["metrics"]
        ev = next(v["data"] for k, v in metrics.items() if k.endswith("eval.json"))
        assert 0 < ev["bpb"] and ev["zlib9_bpb"] > ev["lzma9e_bpb"] > 0  # the headline
        bpbs[name] = ev["bpb"]
    assert all(0 < b < 8 for b in bpbs.values())
    table = run(repo, "spark", "compare", "coder-byte", "coder-bpe", "-o", "out/cmp.png")
    assert table.returncode == 0, table.stdout
    # the metrics table's head: the last table that starts so (a wide table puts the
    # runs' params first, then the metrics beside the numbers; compare.compare_table)
    head = [ln for ln in table.stdout.splitlines() if ln.startswith(("experiment", "#  "))][-1]
    assert {"bpb", "zlib9", "lzma9e"} <= set(head.split()), head
