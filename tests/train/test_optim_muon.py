"""optimizer muon, schedule wsd and init_out zero (sparktrain/train/optim.py):
Muon on the layers' matrices and AdamW on the rest, one step equal to
torch.optim.Muon (the hf extra), a run stopped mid-way resumed to the same
bytes, the same bytes on one worker or two."""
from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest

from sparktrain.core.errors import SparkError
from sparktrain.model import backend
from sparktrain.model.base import RESIDUAL_OUT
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig
from sparktrain.params import MUON_ADAM_LR, StepConfig, parse_params, step_record
from sparktrain.train.optim import (NORMUON_BETA2, NS_COEFFICIENTS, NS_STEPS, lr_at,
                                    make_optimizer, orthogonalise)

from model.xpkit import target_device
from sparkhelp import HANG_GUARD_S
from test_corpus_loop import coder_project, pipeline

CFG = ModelConfig(dim=16, n_layer=2, n_head=2, n_kv_head=1, seq_len=8).validate()


def params_and_grads(seed=0):
    model = build_model(CFG)
    params = model.init_params(seed, b"muon")
    rng = np.random.default_rng(seed + 1)
    grads = {n: rng.standard_normal(a.shape).astype(np.float32) for n, a in params.items()}
    return params, grads


def test_muon_takes_the_layers_matrices_and_adamw_the_rest():
    params, _ = params_and_grads()
    opt = make_optimizer(StepConfig(optimizer="muon", lr=0.02), params, list(params))
    assert set(opt.hidden) == {n for n in params if n.startswith("spark.layers.")
                               and params[n].ndim == 2}
    assert set(opt.adam.m) == {"spark.embed.weight", "spark.lm_head.weight",
                               "spark.final_norm.weight",
                               *(f"spark.layers.{L}.{k}_norm.weight" for L in range(2)
                                 for k in ("attn", "mlp"))}
    assert opt.adam_lr == MUON_ADAM_LR


@pytest.mark.parametrize("ns, band", [("jordan", (0.5, 1.5)), ("polar", (0.7, 1.2))])
def test_newton_schulz_brings_singular_values_near_one_either_way_round(ns, band):
    rng = np.random.default_rng(0)
    for shape in ((64, 16), (16, 64), (32, 32)):
        g = rng.standard_normal(shape).astype(np.float32)
        o = orthogonalise(backend.of(g), g, ns)
        assert o.shape == shape and o.dtype == np.float32
        s = np.linalg.svd(o, compute_uv=False)
        assert band[0] < s.min() and s.max() < band[1], (ns, s.min(), s.max())


def test_polar_express_is_closer_to_orthogonal_than_the_fixed_quintic():
    rng = np.random.default_rng(1)
    g = (rng.standard_normal((48, 16)) * np.logspace(0, -3, 16)).astype(np.float32)  # ill-conditioned
    worst = {ns: np.abs(np.linalg.svd(orthogonalise(backend.of(g), g, ns),
                                      compute_uv=False) - 1).max() for ns in ("jordan", "polar")}
    assert worst["polar"] < worst["jordan"], worst


def normuon_reference(updates, params, lr):
    """NorMuon as the paper writes it, in float64 and loops, from Muon's orthogonalised
    updates (one list a step): v <- b2 v + (1 - b2) mean(o^2) per row (per column when
    wider); u = o / sqrt(v), scaled to |o|_F; W <- W - lr sqrt(max(1, m/n)) u."""
    w = params.astype(np.float64)
    tall = w.shape[0] >= w.shape[1]
    v = np.zeros(w.shape[0] if tall else w.shape[1])
    for o in updates:
        o = o.astype(np.float64)
        lines = o if tall else o.T
        v = NORMUON_BETA2 * v + (1 - NORMUON_BETA2) * np.array([np.mean(r * r) for r in lines])
        u = np.stack([r / np.sqrt(vi) for r, vi in zip(lines, v)])
        u = u if tall else u.T
        u *= np.linalg.norm(o) / np.linalg.norm(u)
        w -= lr * np.sqrt(max(1.0, w.shape[0] / w.shape[1])) * u
    return w


def test_normuon_equals_its_written_form_and_keeps_the_update_norm():
    """Two steps of step.normuon on each hidden matrix (tall, wide, square) against the
    reference above fed the same orthogonalised updates, which plain Muon's steps give."""
    lr = 0.02
    params, grads = params_and_grads(seed=5)
    hidden = [n for n in params if n.startswith("spark.layers.") and params[n].ndim == 2]
    rng = np.random.default_rng(9)
    second = {n: rng.standard_normal(params[n].shape).astype(np.float32) for n in hidden}
    plain = {n: params[n].copy() for n in hidden}
    ours = {n: params[n].copy() for n in hidden}
    muon = make_optimizer(StepConfig(optimizer="muon", lr=lr), plain, hidden)
    nor = make_optimizer(StepConfig(optimizer="muon", lr=lr, normuon=True), ours, hidden)
    updates = {n: [] for n in hidden}
    for g in (grads, second):
        before = {n: plain[n].copy() for n in hidden}
        ours_before = {n: ours[n].copy() for n in hidden}
        muon.update(plain, g, lr, 1.0)
        nor.update(ours, g, lr, 1.0)
        for n in hidden:  # plain Muon's step is lr sqrt(max(1, m/n)) o
            m_, n_ = plain[n].shape
            updates[n].append((before[n] - plain[n]) / (lr * np.sqrt(max(1.0, m_ / n_))))
            # each step of NorMuon is as long as Muon's, in another direction
            assert np.linalg.norm(ours[n] - ours_before[n]) == pytest.approx(
                np.linalg.norm(plain[n] - before[n]), rel=1e-4)
    shapes = set()
    for n in hidden:
        want = normuon_reference(updates[n], params[n], lr)
        moved = np.abs(want - params[n]).max()
        np.testing.assert_allclose(ours[n], want, rtol=0, atol=1e-4 * moved, err_msg=n)
        assert not np.allclose(ours[n], plain[n], rtol=0, atol=1e-3 * moved), n
        shapes.add(np.sign(params[n].shape[0] - params[n].shape[1]))
    assert shapes == {-1, 0, 1}  # wide, square and tall matrices all checked
    state = nor.state()
    assert {k for k in state if k.startswith("normuon.")} == {f"normuon.{n}" for n in hidden}
    assert "normuon." not in "".join(muon.state())  # plain Muon keeps no such state


@pytest.mark.parametrize("target", ["strict", "torch-cpu"])
def test_normuon_on_a_namespace_matches_numpy(target):
    """The generic (array-API) path a GPU takes: two NorMuon steps as numpy's, to float32
    rounding (array-api-strict in make test, PyTorch under make test-gpu)."""
    dev = target_device(target)
    params, grads = params_and_grads(seed=6)
    step = StepConfig(optimizer="muon", lr=0.02, normuon=True)
    ref = {n: a.copy() for n, a in params.items()}
    ours = dev.to_device(params)
    ref_opt, opt = make_optimizer(step, ref, list(ref)), make_optimizer(step, ours, list(ours))
    for _ in range(2):
        ref_opt.update(ref, grads, 0.02, 1.0)
        opt.update(ours, dev.to_device(grads), 0.02, 1.0)
    back, state = dev.to_host(ours), dev.to_host(opt.state())
    for n, a in ref.items():
        np.testing.assert_allclose(back[n], a, rtol=0, atol=1e-6, err_msg=n)
    for k, a in ref_opt.state().items():
        np.testing.assert_allclose(state[k], a, rtol=1e-4, atol=1e-9, err_msg=k)


def test_wsd_schedule_warms_up_holds_then_cools_down_linearly():
    step = StepConfig(schedule="wsd", lr=1.0, min_lr=0.1, warmup=2, cooldown=0.4,
                      outer=2, inner=5)
    got = [lr_at(step, t, 10) for t in range(10)]
    assert got[:2] == [0.5, 1.0] and got[2:6] == [1.0] * 4
    assert np.allclose(got[6:], [0.775, 0.55, 0.325, 0.1])


@pytest.mark.parametrize("changes, needle", [
    ({"cooldown": 0.2}, "cooldown needs schedule: wsd"),
    ({"adam_lr": 0.01}, "adam_lr applies to optimizer muon"),
    ({"optimizer": "adamw", "muon_ns": "polar"}, "muon_ns applies to optimizer muon"),
    ({"normuon": True}, "normuon applies to optimizer muon"),
    ({"embed_lr": 0.1}, "embed_lr applies to optimizers adamw and muon, not sgd"),
    ({"optimizer": "muon", "embed_lr": 0}, "embed_lr must be > 0"),
    ({"weight_decay": 0.1}, "weight_decay applies to optimizers adamw and muon, not sgd"),
    ({"optimizer": "muon", "normuon": 1}, "normuon must be bool"),
    ({"schedule": "wsd", "warmup": 30, "cooldown": 0.5}, "overlap"),
])
def test_incoherent_knobs_are_refused(changes, needle):
    with pytest.raises(SparkError, match=needle):
        parse_params({"job": "job-x-001", "program": "p.sparkbc",
                      "step": {"outer": 4, "inner": 10, **changes}})


def test_zero_init_out_zeroes_only_the_residual_out_projections():
    model = build_model(CFG)
    scaled = model.init_params(3, b"z")
    zero = model.init_params(3, b"z", residual_out="zero")
    for n in scaled:
        if n.endswith(RESIDUAL_OUT):
            assert not zero[n].any() and scaled[n].any()
        else:
            assert np.array_equal(zero[n], scaled[n]), n
    # zero_head: the head too; every other tensor drawn the same
    head = model.init_params(3, b"z", residual_out="zero_head")
    for n in scaled:
        if n.endswith(RESIDUAL_OUT) or n == "spark.lm_head.weight":
            assert not head[n].any() and scaled[n].any(), n
        else:
            assert np.array_equal(head[n], scaled[n]), n


@pytest.mark.hf
def test_one_muon_step_equals_torch_optim_muon(monkeypatch):
    torch = pytest.importorskip("torch")
    if not hasattr(torch.optim, "Muon"):
        pytest.skip("this torch has no torch.optim.Muon")
    lr, wd, mu = 0.02, 0.1, 0.95
    params, grads = params_and_grads(seed=4)
    hidden = [n for n in params if n.startswith("spark.layers.") and params[n].ndim == 2]
    ours = {n: params[n].copy() for n in hidden}
    opt = make_optimizer(StepConfig(optimizer="muon", lr=lr, weight_decay=wd,
                                    muon_momentum=mu), ours, hidden)
    for _ in range(2):  # the second step reads the momentum the first left
        opt.update(ours, grads, lr, 1.0)

    def torch_steps():
        ts = {n: torch.tensor(params[n], requires_grad=True) for n in hidden}
        ref = torch.optim.Muon(list(ts.values()), lr=lr, weight_decay=wd, momentum=mu,
                               nesterov=True, ns_coefficients=NS_COEFFICIENTS,
                               ns_steps=NS_STEPS)
        for _ in range(2):
            for n, t in ts.items():
                t.grad = torch.tensor(grads[n])
            ref.step()
        return {n: t.detach().numpy() for n, t in ts.items()}

    # torch runs its Newton-Schulz in bfloat16 (a GPU's fast type); ours is float32
    rough = torch_steps()
    # the same code of torch's with its bfloat16 cast kept in float32: float32 tolerance
    # (older torch casts with Tensor.bfloat16(), newer with .to(dtype=torch.bfloat16))
    monkeypatch.setattr(torch.Tensor, "bfloat16", lambda self: self.clone())
    muon_module = sys.modules.get("torch.optim._muon")
    if muon_module is not None and hasattr(muon_module, "torch"):
        class Float32Torch:   # torch, whose bfloat16 is float32, as _muon sees it
            bfloat16 = torch.float32

            def __getattr__(self, name):
                return getattr(torch, name)

        monkeypatch.setattr(muon_module, "torch", Float32Torch())
    exact = torch_steps()
    for n in hidden:
        moved = np.abs(params[n] - exact[n]).max()
        np.testing.assert_allclose(ours[n], exact[n], rtol=0, atol=2e-6 * max(moved, 1e-3),
                                   err_msg=n)
        np.testing.assert_allclose(ours[n] - params[n], rough[n] - params[n], rtol=0,
                                   atol=0.05 * moved, err_msg=n)


STEP = {"outer": 4, "inner": 5, "batch_size": 4, "optimizer": "muon", "lr": 0.02,
        "adam_lr": 0.01, "weight_decay": 0.01, "schedule": "wsd", "warmup": 2,
        "cooldown": 0.3, "min_lr": 0.002, "init_out": "zero", "shards": 2}
OUTPUTS = ("weights.safetensors", "checkpoint.json", "ARTIFACT")


def test_a_muon_run_learns_and_records_its_knobs(tmp_path):
    folder = pipeline(coder_project(tmp_path, step=STEP))
    ck = json.loads((folder / "checkpoint.json").read_text())
    assert (ck["optimizer"], ck["schedule"], ck["init_out"]) == ("muon", "wsd", "zero")
    assert ck["loss_after"] < ck["loss_before"]


# every architecture option on, and the head zeroed too (docs/model.md "Architecture options")
OPTIONS = {"arch": {"mlp": "relu2", "qk_norm": True, "logit_cap": 15.0, "bigram": 512,
                   "value_residual": True, "unet": True}}


@pytest.mark.slow
@pytest.mark.parametrize("changes", [{}, OPTIONS], ids=["plain", "options"])
def test_a_muon_run_stopped_mid_way_resumes_to_the_same_bytes_on_any_workers(tmp_path, changes):
    if changes:
        changes = {**changes, "step": {"init_out": "zero_head", "muon_ns": "polar",
                                       "normuon": True}}
    step = {**STEP, **changes.get("step", {})}
    arch = {k: v for k, v in changes.items() if k != "step"}
    whole = pipeline(coder_project(tmp_path / "a", step={**step, "workers": 2}, **arch))
    root = coder_project(tmp_path / "b", step={**step, "checkpoint_every": 1, "workers": 1},
                         **arch)
    folder = pipeline(root, until="prepare")
    stop_after_pass_2(root, folder)
    assert (folder / "resume.json").exists() and not (folder / "weights.safetensors").exists()
    pipeline(root, until="step")
    for name in ("weights.safetensors", "ARTIFACT"):
        assert (folder / name).read_bytes() == (whole / name).read_bytes(), name
    saved = json.loads((folder / "checkpoint.json").read_text())
    assert saved["weights_sha256"] == json.loads(
        (whole / "checkpoint.json").read_text())["weights_sha256"]
    assert {k: saved["arch"].get(k) for k in changes.get("arch", {})} == changes.get("arch", {})
    assert {k: saved.get(k) for k in changes.get("step", {})} == changes.get("step", {})


def stop_after_pass_2(root, folder):
    """The step stage's run, stopped by an exception after pass 2's saved state."""
    import subprocess
    import sys
    code = ("import sys, stages.step as s\n"
            "from sparktrain.train import live\n"
            "orig = live.Watcher.pass_done\n"
            "def stop(self, point, *a):\n"
            "    orig(self, point, *a)\n"
            "    if point['outer'] == 2: raise SystemExit(9)\n"
            "live.Watcher.pass_done = stop\n"
            "sys.exit(s.run(s.STAGE, s.step))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 9, done.stderr


@pytest.mark.parametrize("optimizer, group_lr", [("adamw", 0.02), ("muon", 0.004)])
def test_embed_lr_moves_the_embedding_tables_at_their_own_rate(optimizer, group_lr):
    """Adam's first step moves every element with a gradient by its rate (m/c1 over
    sqrt(v/c2) is the gradient's sign): the embedding and the bigram table by embed_lr,
    the head and norms by the group's rate (lr under adamw, adam_lr under muon)."""
    cfg = dataclasses.replace(CFG, bigram=64)
    params = build_model(cfg).init_params(0, b"e")
    before = {n: a.copy() for n, a in params.items()}
    knobs = {"adam_lr": group_lr} if optimizer == "muon" else {}
    step = StepConfig(optimizer=optimizer, lr=0.02, embed_lr=0.3, **knobs)
    grads = {n: np.full(a.shape, 0.5, dtype=np.float32) for n, a in params.items()}
    make_optimizer(step, params, list(params)).update(params, grads, step.lr, 1.0)
    for name, rate in (("spark.embed.weight", 0.3), ("spark.bigram.weight", 0.3),
                       ("spark.lm_head.weight", group_lr), ("spark.final_norm.weight", group_lr)):
        np.testing.assert_allclose(before[name] - params[name], rate, rtol=1e-3, err_msg=name)
    assert step_record(step)["embed_lr"] == 0.3
    assert "embed_lr" not in step_record(dataclasses.replace(step, embed_lr=None))
