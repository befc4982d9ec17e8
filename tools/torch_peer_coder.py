"""A PyTorch peer of the coder proof: the same recipe on the same prepared data,
so anyone can rerun the comparison (docs/results/speed.md, "A PyTorch peer").

    python tools/torch_peer_coder.py [--params data/programs/coder-proof.yaml]
                                     [-S step.outer=2 ...] [--threads 2] [--prepare] [--json]

The same model (the project's architecture, started from the project's own
init of the job: same seed, same salt), the same windows in the same order
(the project's seeded sampler), the same optimizer, schedule, warm-up, clip,
steps and batch, in PyTorch eager with scaled_dot_product_attention, on the
job's prepared train.bin / val.bin (run `make spark-coder-proof` first, or say
--prepare). Prints training tokens/s (the timed part is the project's too:
forward, backward, clip and update of each micro-step) and the held-out bits
per byte measured the project's way: non-overlapping windows over the whole
val stream, every target once, summed nats / ln 2 / held-out bytes.

Needs torch (the optional `hf` extra: pip install -e '.[hf]').
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
import numpy as np

from coder_proof import with_overrides
from sparktrain.data.base import bits_per_byte
from sparktrain.data.corpus import WindowSampler, read_prepared, stream_batches
from sparktrain.data.source import prepare_job, source_for
from sparktrain.data.tokenizer import load_tokenizer
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import read_input, sha256_file
from sparktrain.core.jobfiles import CORPUS, TOKENIZER
from sparktrain.model.build import build_model
from sparktrain.model.config import BIGRAM, layer_names
from sparktrain.model.options import bigram_ids
from sparktrain.model.layers import RMS_EPS, ROPE_BASE
from sparktrain.params import parse_params
from sparktrain.train.job import job_from_program
from sparktrain.train.optim import (ADAM_EPS, EMBED_TABLES, HIDDEN, NS_COEFFICIENTS, NS_STEPS,
                                    lr_at)
from sparktrain.core.safeload import load_yaml

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # checked in main(), so --help works without it
    torch = F = None

# the arch options logits_of computes
PEER_OPTIONS = {"mlp", "qk_norm", "logit_cap", "value_residual", "unet", "bigram"}
LOSS_BATCH = 16  # windows per forward over the held-out stream, as the corpus loop


# ------------------------------------------------------------------ the model

def rope_tables(T: int, hd: int):
    """cos, sin (T, hd): angle p * f_i for pair (i, i + hd/2), both halves."""
    freqs = ROPE_BASE ** (-2.0 * np.arange(hd // 2) / hd)               # (hd/2,)
    angle = np.arange(T)[:, None] * freqs[None, :]                      # (T, hd/2)
    full = np.concatenate([angle, angle], axis=1)                       # (T, hd)
    return (torch.from_numpy(np.cos(full).astype(np.float32)),
            torch.from_numpy(np.sin(full).astype(np.float32)))


def rope(u, cos, sin):
    """Rotate (u_i, u_{i+hd/2}) of every head: u (B, heads, T, hd)."""
    u1, u2 = u.chunk(2, dim=-1)
    return u * cos + torch.cat([-u2, u1], dim=-1) * sin


def logits_of(p: dict, inputs, cfg, cos, sin):
    """The Spark decoder (docs/model.md, "The model"): inputs (B, T) -> (B, T, V)."""
    B, T = inputs.shape
    C, H, KV, hd = cfg.dim, cfg.n_head, cfg.n_kv_head, cfg.head_dim
    x = p["spark.embed.weight"][inputs]                                   # (B, T, C)
    if cfg.bigram:                            # arch.bigram: the hashed (previous, current) row
        ids = bigram_ids(inputs.numpy(), cfg.vocab, cfg.bigram)
        x = x + p[BIGRAM][torch.from_numpy(ids)]                          # (B, T, C)
    n, outs, v1 = cfg.n_layer, [], None
    for L in range(n):
        if cfg.unet and L >= n - n // 2:      # arch.unet: block n-1-L's output, weighted
            x = x + p["spark.skip.weight"][n - 1 - L] * outs[n - 1 - L]
        w = {k: p[name] for k, name in layer_names(L).items() if name in p}  # relu2: no gate
        h = F.rms_norm(x, (C,), w["attn_norm"], eps=RMS_EPS)             # (B, T, C)
        q = (h @ w["q"].T).view(B, T, H, hd).transpose(1, 2)             # (B, H, T, hd)
        k = (h @ w["k"].T).view(B, T, KV, hd).transpose(1, 2)            # (B, KV, T, hd)
        v = (h @ w["v"].T).view(B, T, KV, hd).transpose(1, 2)            # (B, KV, T, hd)
        if cfg.value_residual:                # arch.value_residual: layer 0's values mixed in
            lam = p["spark.value_mix.weight"][L - 1] if L else None
            v1, v = (v, v) if L == 0 else (v1, (1 - lam) * v + lam * v1)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if cfg.qk_norm:                                                   # arch.qk_norm
            q, k = F.rms_norm(q, (hd,), eps=RMS_EPS), F.rms_norm(k, (hd,), eps=RMS_EPS)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=True)               # (B, H, T, hd)
        x = x + y.transpose(1, 2).reshape(B, T, C) @ w["o"].T
        h = F.rms_norm(x, (C,), w["mlp_norm"], eps=RMS_EPS)
        if cfg.mlp == "relu2":                                            # arch.mlp: relu2
            x = x + F.relu(h @ w["mlp_up"].T).square() @ w["mlp_down"].T
        else:
            x = x + (F.silu(h @ w["mlp_gate"].T) * (h @ w["mlp_up"].T)) @ w["mlp_down"].T
        if L < n // 2:
            outs.append(x)                                                # the U-net's skips
    x = F.rms_norm(x, (C,), p["spark.final_norm.weight"], eps=RMS_EPS)
    logits = x @ p["spark.lm_head.weight"].T                              # (B, T, V)
    if cfg.logit_cap:                                                     # arch.logit_cap
        logits = cfg.logit_cap * torch.tanh(logits / cfg.logit_cap)
    return logits


def initial_tensors(job, cfg, seed: int) -> dict:
    """The project's fresh init of this job (seed, salted by the program's sha256)."""
    salt = bytes.fromhex(job.sparkbc_sha256) if job.sparkbc_sha256 else b""
    params = build_model(cfg).init_params(seed, salt, dtype=np.float32)
    return {n: torch.from_numpy(a.copy()).requires_grad_(True) for n, a in params.items()}


def make_optimizer(step, p: dict) -> list:
    """The project's optimizers in torch; each param group's "ratio" is its rate / step.lr
    (the loop sets its lr from the schedule). AdamW decays matrices only, SGD is heavy-ball,
    muon is torch.optim.Muon on the layers' matrices (its bfloat16 Newton-Schulz) beside
    AdamW at adam_lr on the rest; step.embed_lr puts the embedding tables in their own group."""
    if step.optimizer == "sgd":
        return [torch.optim.SGD([{"params": list(p.values()), "ratio": 1.0}], lr=step.lr,
                                momentum=step.momentum)]
    hidden = {n for n, t in p.items() if step.optimizer == "muon"
              and n.startswith(HIDDEN) and t.ndim == 2}
    tables = {n for n in p if n in EMBED_TABLES and step.embed_lr is not None}
    rest = {n: t for n, t in p.items() if n not in hidden | tables}
    adam_ratio = step.adam_lr_or_default() / step.lr if hidden else 1.0
    groups = [{"params": [t for t in rest.values() if t.ndim >= 2], "ratio": adam_ratio,
               "weight_decay": step.weight_decay},
              {"params": [t for t in rest.values() if t.ndim < 2], "ratio": adam_ratio,
               "weight_decay": 0.0}]
    if tables:
        groups.append({"params": [p[n] for n in sorted(tables)], "ratio": step.embed_lr / step.lr,
                       "weight_decay": step.weight_decay})
    for group in groups:  # the schedule's first rate until the loop sets each step's
        group["lr"] = step.lr * group["ratio"]
    adamw = torch.optim.AdamW(groups, betas=(step.beta1, step.beta2), eps=ADAM_EPS)
    if not hidden:
        return [adamw]
    muon = torch.optim.Muon([{"params": [p[n] for n in hidden], "ratio": 1.0}], lr=step.lr,
                            weight_decay=step.weight_decay, momentum=step.muon_momentum,
                            nesterov=True, ns_coefficients=NS_COEFFICIENTS, ns_steps=NS_STEPS)
    return [muon, adamw]


# ------------------------------------------------------------------ the run

def train(p: dict, cfg, step, data, progress=lambda line: None) -> dict:
    """step.outer x step.inner micro-steps; (train seconds, tokens, clipped steps)."""
    cos, sin = rope_tables(cfg.seq_len, cfg.head_dim)
    sampler = WindowSampler(data.train, cfg.seq_len, step.batch_size, step.seed)
    opts = make_optimizer(step, p)
    total, seconds, tokens, clipped = step.outer * step.inner, 0.0, 0, 0
    for t in range(total):
        batch = sampler.next()
        t0 = time.perf_counter()
        inputs, targets = torch.from_numpy(batch.inputs), torch.from_numpy(batch.targets)
        logits = logits_of(p, inputs, cfg, cos, sin)                      # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        grads = [t_.grad for t_ in p.values()]
        norm = float(torch.sqrt(sum((g.double() * g.double()).sum() for g in grads)))
        loss_value = float(loss.detach())
        if not math.isfinite(norm) or not math.isfinite(loss_value):
            raise SparkError(f"non-finite loss or gradient at micro-step {t + 1}")
        if step.clip > 0 and norm > step.clip:
            clipped += 1
            for g in grads:
                g.mul_(step.clip / norm)
        for opt in opts:
            for group in opt.param_groups:
                group["lr"] = lr_at(step, t, total) * group["ratio"]
            opt.step()
        seconds += time.perf_counter() - t0
        tokens += batch.n_tokens
        if (t + 1) % step.inner == 0:
            progress(f"outer {(t + 1) // step.inner}/{step.outer}  loss {loss_value:.4f}  "
                     f"{tokens / seconds:,.0f} tok/s")
    return {"train_seconds": seconds, "tokens": tokens, "clipped_steps": clipped}


def heldout_bpb(p: dict, cfg, data, tokenizer) -> dict:
    """The whole held-out stream in non-overlapping windows, every target once."""
    cos, sin = rope_tables(cfg.seq_len, cfg.head_dim)
    byte_lengths = tokenizer.byte_lengths()
    nats, count, nbytes = 0.0, 0, 0
    with torch.inference_mode():
        for batch in stream_batches(data.val, cfg.seq_len, LOSS_BATCH, tokenizer.eos):
            logits = logits_of(p, torch.from_numpy(batch.inputs), cfg, cos, sin)
            nll = F.cross_entropy(logits.reshape(-1, cfg.vocab),
                                  torch.from_numpy(batch.targets).reshape(-1), reduction="none")
            mask = torch.from_numpy(batch.mask).reshape(-1)
            nats += float((nll.double() * mask.double()).sum())
            count += batch.n_counted
            nbytes += int(byte_lengths[batch.targets[batch.mask > 0]].sum())
    if nbytes != data.heldout_bytes:
        raise SparkError(f"held-out tokens stand for {nbytes} bytes, the corpus has "
                         f"{data.heldout_bytes}; run the prepare stage again")
    return {"heldout_loss": nats / count, "heldout_bpb": bits_per_byte(nats, nbytes),
            "heldout_bytes": nbytes, "heldout_targets": count}


def run_peer(params_doc: dict, threads: int, prepare: bool = False,
             progress=lambda line: None) -> dict:
    p = parse_params(params_doc)
    other = sorted(set(p.model_config().options()) - PEER_OPTIONS)
    if other or p.step.muon_ns != "jordan" or p.step.normuon or p.step.init_out == "zero_head":
        what = ", ".join(other) or "step.muon_ns, step.normuon and init_out zero_head"
        raise SparkError(f"the PyTorch peer trains the Llama recipe with arch mlp, qk_norm, "
                         f"logit_cap, value_residual, unet and bigram only: drop {what}")
    job = job_from_program(p.program, p.job)
    if prepare:
        prepare_job(job.out_dir, source_for(job.dataset, p), p.tokenizer, p.vocab_size)
    tok_path = job.out_dir / TOKENIZER
    read_input(tok_path, "tokenizer.json (run `make spark-coder-proof` first, or --prepare)")
    tokenizer = load_tokenizer(tok_path)
    data = read_prepared(job.out_dir / CORPUS, sha256_file(tok_path))
    cfg = dataclasses.replace(p.model_config(), vocab=tokenizer.vocab).validate()
    torch.set_num_threads(threads)
    tensors = initial_tensors(job, cfg, p.step.seed)
    t0 = time.perf_counter()
    run = train(tensors, cfg, p.step, data, progress)
    score = heldout_bpb(tensors, cfg, data, tokenizer)
    step = p.step
    return {"peer": f"torch {torch.__version__} eager + SDPA", "threads": torch.get_num_threads(),
            "job": job.id, "scale": p.scale, "arch": cfg.to_dict(), "optimizer": step.optimizer,
            "micro_steps": step.outer * step.inner, "batch_size": step.batch_size,
            **run, "tokens_per_s": run["tokens"] / max(run["train_seconds"], 1e-9),
            "wall_seconds": time.perf_counter() - t0, **score}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="data/programs/coder-proof.yaml")
    ap.add_argument("-S", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a param (YAML value, dots for nested keys), as the proof")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--prepare", action="store_true",
                    help="tokenize and prepare the job's corpus first (as the proof does)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args(argv)
    if torch is None:
        raise SparkError("the PyTorch peer needs torch: pip install -e '.[hf]'")
    if args.threads < 1:
        raise SparkError(f"--threads must be a positive integer, got {args.threads}")
    doc = with_overrides(load_yaml(read_input(args.params, "params file"), args.params),
                         args.overrides)
    r = run_peer(doc, args.threads, args.prepare,
                 progress=lambda line: print(f"[torch peer] {line}", file=sys.stderr))
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return 0
    print(f"{r['peer']}, {r['threads']} threads: {r['scale']}, vocab {r['arch']['vocab']}, "
          f"{r['optimizer']}, {r['micro_steps']} micro-steps of {r['batch_size']} x "
          f"{r['arch']['seq_len']}")
    print(f"  trained in {r['train_seconds']:.1f} s: {r['tokens_per_s']:,.0f} tokens/s "
          f"({r['clipped_steps']} steps clipped)")
    print(f"  held-out {r['heldout_bpb']:.4f} bits per byte on {r['heldout_bytes']:,} bytes "
          f"(loss {r['heldout_loss']:.4f}, every target once); wall {r['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SparkError as err:
        print(f"torch peer: error: {err}", file=sys.stderr)
        sys.exit(2)
