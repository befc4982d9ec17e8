"""The short version of `make spark-sgd-proof-scale`: the large model on the
task families, a small budget, and held-out loss must fall."""
from __future__ import annotations

from sparktrain.data.pairs_score import evaluate
from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES
from sparktrain.model.weights import load_weights
from sparktrain.data.source import source_for
from sparktrain.params import Defaults, StepConfig
from sparktrain.data.pairs import load_pairs
from sparktrain.train.job import job_from_program
from sparktrain.train.runner import run_job


def test_large_scale_short_budget_lowers_heldout_loss(project, monkeypatch):
    monkeypatch.chdir(project)
    job = job_from_program("data/programs/train-scale.sparkbc", "job-scale-001")
    cfg = SCALES["large"]
    heldout = load_pairs("data/eval/scale_heldout.jsonl")
    start = build_model(cfg).init_params(0, bytes.fromhex(job.sparkbc_sha256))
    before = evaluate(start, cfg, heldout, max_new=1, n_samples=0)["loss"]
    res = run_job(job, StepConfig(outer=2, inner=10, lr=0.1, batch_size=16), cfg,
                           source_for(job.dataset, Defaults()), progress=lambda line: None)
    assert res.checkpoint["loss_after"] < res.checkpoint["loss_before"]
    trained, _ = load_weights(project / job.out / "weights.safetensors")
    after = evaluate(trained, cfg, heldout, max_new=1, n_samples=0)["loss"]
    assert after < before, (before, after)
