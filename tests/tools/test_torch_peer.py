"""tools/torch_peer_coder.py is the coder recipe in PyTorch: the project's model,
optimizer and held-out measurement, checked against the project's own numbers.
Needs torch (the `hf` extra; make test-hf)."""
from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from sparkhelp import ROOT

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "tools"))
import torch_peer_coder as peer  # noqa: E402

from sparktrain.data.corpus import stream_batches  # noqa: E402
from sparktrain.model.build import build_model  # noqa: E402
from sparktrain.model.config import SCALES  # noqa: E402
from sparktrain.params import StepConfig  # noqa: E402
from sparktrain.train.optim import make_optimizer  # noqa: E402

pytestmark = pytest.mark.hf
CFG = dataclasses.replace(SCALES["tiny"], vocab=300)
STEP = {"outer": 1, "inner": 3, "lr": 0.01, "batch_size": 4, "seed": 0, "clip": 1.0,
        "optimizer": "adamw", "weight_decay": 0.01, "schedule": "cosine", "warmup": 1,
        "min_lr": 0.001}


@pytest.mark.parametrize("options", [{}, {"mlp": "relu2", "qk_norm": True, "logit_cap": 3.0},
                                     {"value_residual": True, "unet": True, "n_layer": 4},
                                     {"bigram": 64}])
def test_the_peer_model_is_the_project_model(options):
    cfg = dataclasses.replace(CFG, **options)
    params = build_model(cfg).init_params(0, b"peer")
    for name in ("spark.skip.weight", "spark.value_mix.weight", "spark.bigram.weight"):
        # not their plain inits (the bigram table starts at zero)
        if name in params:
            params[name] = np.linspace(0.3, 0.8, params[name].size,
                                       dtype=np.float32).reshape(params[name].shape)
    inputs = np.random.default_rng(0).integers(0, cfg.vocab, (3, cfg.seq_len))
    want = build_model(cfg).forward_logits(params, inputs)
    cos, sin = peer.rope_tables(cfg.seq_len, cfg.head_dim)
    got = peer.logits_of({n: torch.from_numpy(a) for n, a in params.items()},
                         torch.from_numpy(inputs), cfg, cos, sin).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("knobs", [{}, {"embed_lr": 0.07}])
def test_the_peer_optimizer_is_the_project_optimizer(knobs):
    step = StepConfig(**{**STEP, **knobs})
    ours = build_model(CFG).init_params(0, b"peer")
    theirs = {n: torch.from_numpy(a.copy()).requires_grad_(True) for n, a in ours.items()}
    opts, project = peer.make_optimizer(step, theirs), make_optimizer(step, ours, list(ours))
    opt, = opts
    rng = np.random.default_rng(1)
    for _ in range(3):
        grads = {n: rng.standard_normal(a.shape, dtype=np.float32) for n, a in ours.items()}
        for n, t in theirs.items():
            t.grad = torch.from_numpy(grads[n].copy())
        opt.step()
        project.update(ours, grads, step.lr, 1.0)
    for n, a in ours.items():
        np.testing.assert_allclose(theirs[n].detach().numpy(), a, rtol=1e-5, atol=1e-6,
                                   err_msg=n)


def test_the_peer_trains_the_tiny_coder_job_and_measures_bpb_the_project_way(project,
                                                                              monkeypatch):
    monkeypatch.chdir(project)
    doc = {"job": "job-coder-tiny", "program": "data/programs/train-coder.sparkbc",
           "scale": "tiny", "tokenizer": "bpe", "vocab_size": 300, "step": dict(STEP),
           "corpus": {"glob": "*.py", "heldout": 0.2}}
    r = peer.run_peer(doc, threads=1, prepare=True)
    assert r["micro_steps"] == 3 and r["tokens"] == 3 * 4 * CFG.seq_len
    assert r["heldout_bytes"] > 0 and 0 < r["heldout_bpb"] < 16
    # the measurement against the project's model on the same (initial) weights
    from sparktrain.data.corpus import read_prepared
    from sparktrain.data.tokenizer import load_tokenizer
    from sparktrain.core.fsutil import sha256_file
    from sparktrain.train.job import job_from_program

    job = job_from_program(doc["program"], doc["job"])
    tok = load_tokenizer(job.out_dir / "tokenizer.json")
    data = read_prepared(job.out_dir / "corpus", sha256_file(job.out_dir / "tokenizer.json"))
    cfg = dataclasses.replace(CFG, vocab=tok.vocab)
    tensors = peer.initial_tensors(job, cfg, seed=0)
    got = peer.heldout_bpb(tensors, cfg, data, tok)
    model = build_model(cfg)
    params = {n: t.detach().numpy() for n, t in tensors.items()}
    nats = sum(model.batch_loss(params, b)[0]
               for b in stream_batches(data.val, cfg.seq_len, peer.LOSS_BATCH, tok.eos))
    assert got["heldout_loss"] * got["heldout_targets"] == pytest.approx(nats, rel=1e-5)


@pytest.mark.parametrize("change", [{"step": {**STEP, "optimizer": "muon", "normuon": True}},
                                    {"step": {**STEP, "init_out": "zero_head"}}])
def test_the_peer_refuses_what_it_does_not_implement(change):
    doc = {"job": "job-coder-tiny", "program": "data/programs/train-coder.sparkbc",
           "step": STEP, **change}
    with pytest.raises(peer.SparkError, match="the Llama recipe with arch mlp, qk_norm, "):
        peer.run_peer(doc, threads=1)
