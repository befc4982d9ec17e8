"""Each architecture option (docs/model.md "Architecture options") against an independent
PyTorch implementation of the decoder, differentiated by autograd (make test-hf): logits to a
relative 1e-5 and every tensor's gradient to 1e-3, in float64; step.dropout given the same
masks. The torch side normalises q and k before rope (the numpy model after it: rope is a
rotation, so the two agree)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sparktrain.model.base import TokenBatch
from sparktrain.model.build import build_model
from sparktrain.model.config import ModelConfig
from sparktrain.model.dropout import SITES, Dropout
from sparktrain.model.layers import RMS_EPS, ROPE_BASE

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.hf

BASE = dict(dim=16, n_layer=2, n_head=4, n_kv_head=2, seq_len=8, vocab=300)
OPTIONS = {"default": {}, "relu2": {"mlp": "relu2"}, "qk_norm": {"qk_norm": True},
           "logit_cap": {"logit_cap": 2.0},
           "bigram": {"bigram": 37},
           "value_residual": {"value_residual": True, "n_layer": 3},
           "unet": {"unet": True, "n_layer": 3}, "unet_even": {"unet": True, "n_layer": 4},
           "all": {"mlp": "relu2", "qk_norm": True, "logit_cap": 2.0, "bigram": 37,
                   "value_residual": True, "unet": True, "n_layer": 4}}


def rms(x, w=None):
    out = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + RMS_EPS)
    return out if w is None else out * w


def rope(u):
    """docs/model.md: (u_i, u_{i+hd/2}) rotated by p * 10000^(-2i/hd); u (B, T, heads, hd)."""
    T, hd = u.shape[1], u.shape[-1]
    f = ROPE_BASE ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64) / hd)
    a = torch.arange(T, dtype=torch.float64)[:, None] * f[None, :]      # (T, hd/2)
    cos, sin = torch.cos(a)[None, :, None, :], torch.sin(a)[None, :, None, :]
    u1, u2 = u[..., :hd // 2], u[..., hd // 2:]
    return torch.cat([u1 * cos - u2 * sin, u1 * sin + u2 * cos], dim=-1)


def torch_loss(p, inputs, targets, mask, cfg: ModelConfig, drop=None):
    """drop (L, site) -> the scaled mask torch's nn.Dropout multiplies that branch by."""
    def dropped(out, L, site):
        return out if drop is None else out * drop[L, site]
    B, T = inputs.shape
    H, KV, hd = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    x = p["spark.embed.weight"][inputs]                                  # (B, T, C)
    if cfg.bigram:  # the pair (previous token, token), the row's first after an id past vocab
        prev = torch.cat([torch.full((B, 1), cfg.vocab), inputs[:, :-1]], dim=1)
        x = x + p["spark.bigram.weight"][(prev * 1_000_003 + inputs) % cfg.bigram]
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    n, outputs = cfg.n_layer, []
    for L in range(n):
        if cfg.unet and L >= n - n // 2:  # U-net: block n-1-L's output, weighted
            x = x + p["spark.skip.weight"][n - 1 - L] * outputs[n - 1 - L]
        w = {k.split(".")[3]: v for k, v in p.items() if k.startswith(f"spark.layers.{L}.")}
        h = rms(x, w["attn_norm"])
        q = (h @ w["q"].T).view(B, T, H, hd)
        k = (h @ w["k"].T).view(B, T, KV, hd)
        v = (h @ w["v"].T).view(B, T, KV, hd)
        if cfg.value_residual:  # ResFormer: the first layer's values, by lambda
            if L == 0:
                v_first = v
            else:
                lam = p["spark.value_mix.weight"][L - 1]
                v = (1 - lam) * v + lam * v_first
        if cfg.qk_norm:
            q, k = rms(q), rms(k)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, dim=2), v.repeat_interleave(H // KV, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
        att = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1)
        y = torch.einsum("bhts,bshd->bthd", att, v).reshape(B, T, -1)
        x = x + dropped(y @ w["o"].T, L, "attn")
        h = rms(x, w["mlp_norm"])
        if cfg.mlp == "relu2":
            a = torch.relu(h @ w["mlp_up"].T) ** 2
        else:
            a = F.silu(h @ w["mlp_gate"].T) * (h @ w["mlp_up"].T)
        x = x + dropped(a @ w["mlp_down"].T, L, "mlp")
        outputs.append(x)
    logits = rms(x, p["spark.final_norm.weight"]) @ p["spark.lm_head.weight"].T
    if cfg.logit_cap:
        logits = cfg.logit_cap * torch.tanh(logits / cfg.logit_cap)
    nll = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), reduction="none")
    return (nll * mask.reshape(-1)).sum() / mask.sum(), logits


@pytest.mark.parametrize("name", OPTIONS)
def test_option_equals_torch_autograd(name):
    cfg = ModelConfig(**{**BASE, **OPTIONS[name]}).validate()
    model = build_model(cfg)
    rng = np.random.default_rng(3)
    params = model.init_params(0, b"torch", dtype=np.float64)
    for a in params.values():  # away from init: every path carries signal
        a += (0.2 if a.ndim == 1 else 0.3) * rng.standard_normal(a.shape)
    inputs = rng.integers(0, cfg.vocab, (3, cfg.seq_len))
    targets = rng.integers(0, cfg.vocab, (3, cfg.seq_len))
    mask = (rng.random((3, cfg.seq_len)) < 0.8).astype(np.float64)
    loss, grads = model.loss_and_grads(params, TokenBatch(inputs, targets, mask))
    tp = {n: torch.tensor(a, requires_grad=True) for n, a in params.items()}
    tloss, tlogits = torch_loss(tp, torch.tensor(inputs), torch.tensor(targets),
                                torch.tensor(mask), cfg)
    tloss.backward()
    logits = model.forward_logits(params, inputs)
    np.testing.assert_allclose(logits, tlogits.detach().numpy(), rtol=1e-5,
                               atol=1e-5 * np.abs(logits).max())
    assert loss == pytest.approx(tloss.item(), rel=1e-5)
    for n, g in grads.items():
        ref = tp[n].grad.numpy()
        np.testing.assert_allclose(g, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max(), err_msg=n)


@pytest.mark.parametrize("name", ["default", "relu2"])
def test_dropout_equals_torch_with_the_same_masks(name):
    """step.dropout (docs/training.md "Reading the data more than once"): nn.Dropout's training-mode maths, input *
    bernoulli(1 - p) / (1 - p), on each block's two branch outputs, given our masks."""
    cfg = ModelConfig(**{**BASE, **OPTIONS[name]}).validate()
    model = build_model(cfg)
    rng = np.random.default_rng(4)
    params = model.init_params(0, b"torch", dtype=np.float64)
    for a in params.values():
        a += (0.2 if a.ndim == 1 else 0.3) * rng.standard_normal(a.shape)
    inputs = rng.integers(0, cfg.vocab, (3, cfg.seq_len))
    targets = rng.integers(0, cfg.vocab, (3, cfg.seq_len))
    mask = (rng.random((3, cfg.seq_len)) < 0.8).astype(np.float64)
    drop = Dropout(0.3, 2, 9)
    loss, grads = model.loss_and_grads(params, TokenBatch(inputs, targets, mask), None, drop)
    masks = {(L, site): torch.tensor(drop.keep(L, site, 3, (cfg.seq_len, cfg.dim))).double()
             / (1 - drop.p) for L in range(cfg.n_layer) for site in SITES}
    tp = {n: torch.tensor(a, requires_grad=True) for n, a in params.items()}
    tloss, _ = torch_loss(tp, torch.tensor(inputs), torch.tensor(targets),
                          torch.tensor(mask), cfg, masks)
    tloss.backward()
    assert loss == pytest.approx(tloss.item(), rel=1e-10)
    assert loss != pytest.approx(model.loss_and_grads(
        params, TokenBatch(inputs, targets, mask))[0], rel=1e-3)  # the masks mattered
    for n, g in grads.items():
        ref = tp[n].grad.numpy()
        np.testing.assert_allclose(g, ref, rtol=1e-7, atol=1e-7 * np.abs(ref).max(), err_msg=n)


@pytest.mark.parametrize("p", [0.05, 0.1, 0.3])
def test_dropout_scales_kept_units_to_torchs_bytes(p, monkeypatch):
    """Given the units torch's own F.dropout kept, our float32 mask gives its output bytes."""
    torch.manual_seed(0)
    x = torch.randn(64, 128) + 8.0                                     # float32, no zeros
    out = F.dropout(x, p, training=True)
    keep = (out != 0).numpy()
    monkeypatch.setattr(Dropout, "keep", lambda self, layer, site, rows, shape: keep)
    ours = x.numpy() * Dropout(p, 0, 0).mask(0, "attn", x.numpy())
    assert 0 < keep.mean() < 1 and np.array_equal(ours, out.numpy())
