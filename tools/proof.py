"""`make spark-sgd-proof[-scale]`: train a program's job for real, then check
every claim its outputs make against the files themselves.

    python tools/proof.py tiny                  # params.yaml's job, scale and knobs
    python tools/proof.py scale [--scale NAME]  # large (or any scale of params.yaml)
                                                # on the task families (~5 min)
    python tools/proof.py scale --scale tiny --outer 1 --inner 2   # its machinery, seconds

Exit 0 only when the loss fell, trained=true, not_sgd=false, claim=false and
the weights on disk hash to the checkpoint's weights_sha256 (and, for scale,
held-out exact_match on the copy family reaches the bar). On a terminal the
training shows the loop's progress bar, elsewhere one line per pass
(docs/training.md "Progress").
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()
from sparktrain.core.errors import SparkError
from sparktrain.data.pairs_score import evaluate
from sparktrain.data.pairs import load_pairs
from sparktrain.data.source import source_for
from sparktrain.core.fsutil import canonical_json, sha256_file
from sparktrain.core.jobfiles import ARTIFACT, CHECKPOINT, EVAL, WEIGHTS
from sparktrain.model.weights import load_model, load_weights
from sparktrain.params import (Defaults, StepConfig, load_params, load_params_or_defaults,
                               model_config)
from sparktrain.train.job import job_from_program
from sparktrain.train.outputs import parse_artifact
from sparktrain.train.runner import run_job
from sparktrain.core.safeload import load_json

# The scale proof's budget: chosen so it finishes within 10 minutes here.
SCALE_KNOBS = dict(outer=80, inner=100, lr=0.1, batch_size=16, clip=1.0, momentum=0.9, seed=0)
COPY_BAR = 0.5


def check_trained(folder: Path) -> dict:
    """Assert the claims of a STEP's outputs; returns the checkpoint."""
    ckpt = load_json((folder / CHECKPOINT).read_bytes(), CHECKPOINT)
    art = parse_artifact((folder / ARTIFACT).read_text())
    _, meta = load_weights(folder / WEIGHTS)
    checks = {
        "loss fell": ckpt["loss_after"] < ckpt["loss_before"],
        "checkpoint trained=true": ckpt["trained"] is True,
        "checkpoint not_sgd=false": ckpt["not_sgd"] is False,
        "checkpoint claim=false": ckpt["claim"] is False,
        "ARTIFACT trained=true": art.get("trained") == "true",
        "ARTIFACT not_sgd=false": art.get("not_sgd") == "false",
        "weights metadata trained=true": meta.get("trained") is True,
        "weights sha256 == checkpoint.weights_sha256":
            sha256_file(folder / WEIGHTS) == ckpt["weights_sha256"],
    }
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    failed = [n for n, ok in checks.items() if not ok]
    if failed:
        raise SystemExit(f"proof failed: {', '.join(failed)}")
    return ckpt


def _eval(folder: Path, data: str, max_new: int | None = None) -> dict:
    params, cfg, _ = load_model(folder / WEIGHTS)
    return evaluate(params, cfg, load_pairs(data), max_new=max_new, n_samples=5)


def proof_tiny() -> int:
    params = load_params()
    job = job_from_program(params.program, params.job)
    print(f"training {job.id} from {job.program} ({params.scale})")
    run_job(job, params.step, params.model_config(),
            source_for(job.dataset, Defaults(), params.eval.data))
    ckpt = check_trained(job.out_dir)
    metrics = _eval(job.out_dir, params.eval.data, params.eval.max_new)
    print(f"loss {ckpt['loss_before']:.4f} -> {ckpt['loss_after']:.4f}  "
          f"({ckpt['loss_after'] / ckpt['loss_before']:.2f}x)")
    print(f"held-out ({params.eval.data}): loss {metrics['loss']:.4f}  "
          f"next_token_accuracy {metrics['next_token_accuracy']:.3f}  "
          f"exact_match {metrics['exact_match']:.3f}")
    print("spark-sgd-proof: ok")
    return 0


# tools/readme_figures.py copies the table between these lines into the README
TABLE_BEGIN, TABLE_END = "--- family table (markdown) ---", "--- end of family table ---"
FAMILY_ORDER = ("copy", "upper", "next", "reverse", "lookup")


def family_table(families: dict) -> list[str]:
    """The held-out metrics per task family as a markdown table, easiest first."""
    rows = [["family", "n", "loss", "next-token acc", "exact match"]]
    order = sorted(families, key=lambda f: (FAMILY_ORDER.index(f) if f in FAMILY_ORDER
                                            else len(FAMILY_ORDER), f))
    for fam in order:
        m = families[fam]
        rows.append([fam, str(m["n"]), f"{m['loss']:.4f}", f"{m['next_token_accuracy']:.3f}",
                     f"{m['exact_match']:.3f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def proof_scale(program: str, job_id: str, heldout: str, knobs: dict, scale: str) -> int:
    job = job_from_program(program, job_id)
    step = StepConfig(**knobs)
    cfg = model_config(scale, load_params_or_defaults().scales)
    print(f"training {job.id} ({scale}) with {knobs}")
    t0 = time.perf_counter()
    run_job(job, step, cfg, source_for(job.dataset, Defaults(), heldout))
    ckpt = check_trained(job.out_dir)
    metrics = _eval(job.out_dir, heldout)
    (job.out_dir / EVAL).write_text(canonical_json(metrics))
    print(f"trained in {time.perf_counter() - t0:.0f}s; loss {ckpt['loss_before']:.4f} -> "
          f"{ckpt['loss_after']:.4f}")
    print(TABLE_BEGIN)
    print("\n".join(family_table(metrics["families"])))
    print(TABLE_END)
    for s in metrics.get("samples", []):
        print(f"  {s['prompt']!r} -> {s['generated']!r} (want {s['expected']!r})")
    copy = metrics["families"].get("copy", {}).get("exact_match", 0.0)
    if knobs != SCALE_KNOBS:
        print(f"spark-sgd-proof-scale: a smaller budget than the proof's; the copy bar "
              f"({COPY_BAR}) is not checked (copy exact_match {copy:.3f})")
        return 0
    if copy < COPY_BAR:
        raise SystemExit(f"proof failed: held-out copy exact_match {copy:.3f} < {COPY_BAR}")
    print(f"spark-sgd-proof-scale: ok (copy exact_match {copy:.3f} >= {COPY_BAR})")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tools/proof.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("which", choices=("tiny", "scale"))
    p.add_argument("--scale", default="large",
                   help="for `scale`: a built-in scale or a row of params.yaml's scales")
    p.add_argument("--outer", type=int, default=None,
                   help="for `scale`: fewer outer passes (a quick check; the bar is skipped)")
    p.add_argument("--inner", type=int, default=None,
                   help="for `scale`: fewer micro-steps per pass (likewise)")
    args = p.parse_args(argv)
    knobs = dict(SCALE_KNOBS, **{k: v for k, v in (("outer", args.outer), ("inner", args.inner))
                                 if v is not None})
    try:
        if args.which == "tiny":
            return proof_tiny()
        return proof_scale("data/programs/train-scale.sparkbc", "job-scale-001",
                           "data/eval/scale_heldout.jsonl", knobs, args.scale)
    except SparkError as err:
        print(f"proof: error: {err}", file=sys.stderr)
        return getattr(err, "exit_code", 2)


if __name__ == "__main__":
    sys.exit(main())
