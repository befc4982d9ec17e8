"""DVC stage eval: the headline metric (eval.json), its detail (eval_detail.json)
and the loss picture (loss.png)."""
import sys
from pathlib import Path

from sparktrain.data.tokenizer import tokenizer_for
from sparktrain.eval.corpus import corpus_metrics
from sparktrain.eval.metrics import evaluate, split_headline
from sparktrain.eval.plot import heldout_points, write_loss_png
from sparktrain.fsutil import sha256_file, write_json
from sparktrain.model.weights import load_model
from sparktrain.train.data import load_pairs
from sparktrain.train.outputs import read_json
from stages.common import job_folder, params, run


def eval_stage() -> Path:
    p = params()
    folder = job_folder(p.job)
    weights = folder / "weights.safetensors"
    tensors, cfg, meta = load_model(weights)
    checkpoint = read_json(folder / "checkpoint.json") or {}
    if checkpoint.get("dataset_kind") == "corpus":  # scored on the held-out stream by step
        metrics = corpus_metrics(checkpoint, meta)
    else:
        # None for a byte model; a BPE pairs model: the job's tokenizer.json, checked
        tok = tokenizer_for(weights, meta, cfg.vocab, folder / "tokenizer.json")
        metrics = evaluate(tensors, cfg, load_pairs(p.eval.data), batch_size=p.eval.batch_size,
                           max_new=p.eval.max_new, n_samples=p.eval.n_samples, tokenizer=tok)
        metrics["data"] = p.eval.data
    metrics["weights_sha256"] = sha256_file(weights)
    # The DVC metric is the few flat numbers `dvc exp show` compares; the rest
    # (counts, per-family tables, samples, hashes) is a plain output beside it.
    headline, detail = split_headline(metrics)
    write_json(folder / "eval_detail.json", detail)
    path = folder / "eval.json"
    write_json(path, headline)
    curve = checkpoint.get("loss_curve") or []
    heldout = heldout_points(headline, curve, path) if curve else None
    write_loss_png(folder / "loss.png", curve, heldout=heldout, job=p.job, scale=p.scale)
    return path


if __name__ == "__main__":
    sys.exit(run("eval", eval_stage))
