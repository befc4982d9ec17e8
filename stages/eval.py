"""DVC stage eval: the held-out metrics as the job's data source scores them
(eval.json: the headline numbers; eval_detail.json: the rest) and the loss
picture (loss.png)."""
import sys
from pathlib import Path

from sparktrain.data.heldout import heldout_metrics
from sparktrain.data.tokenizer import read_tokenizer, tokenizer_for
from sparktrain.eval.dynamic import heldout_dynamic
from sparktrain.core.metric_keys import split_headline
from sparktrain.eval.plot import heldout_points, loss_png
from sparktrain.core.fsutil import atomic_write_bytes, canonical_json, sha256_file
from sparktrain.core.jobfiles import CHECKPOINT, CORPUS, EVAL, EVAL_DETAIL, LOSS_PNG, TOKENIZER, WEIGHTS
from sparktrain.model.weights import load_model
from sparktrain.repro.dvclock import check_room
from sparktrain.train.outputs import read_job_json
from stages.common import params, run
from stages.job import job_source


def eval_stage() -> Path:
    p = params()
    job, source = job_source(p)
    folder = job.out_dir
    weights = folder / WEIGHTS
    tensors, cfg, meta = load_model(weights)
    # the tokenizer the weights record (bytes when they record none), checked
    tokenizer = tokenizer_for(weights, meta, cfg.vocab, folder / TOKENIZER)
    _, tokenizer_sha256 = read_tokenizer(folder / TOKENIZER)
    metrics = heldout_metrics(source, folder / CORPUS, tensors, cfg, tokenizer, tokenizer_sha256,
                              p.eval, heldout_dynamic)
    metrics["weights_sha256"] = sha256_file(weights)
    # The DVC metric is the few flat numbers `dvc exp show` compares; the rest
    # (counts, per-family tables, samples, hashes) is a plain output beside it.
    headline, detail = split_headline(metrics)
    path = folder / EVAL
    curve = (read_job_json(folder / CHECKPOINT) or {}).get("loss_curve") or []
    heldout = heldout_points(headline, curve, path) if curve else None
    # every byte made before the first write: a disk without room for them and DVC's
    # copies is refused here, not by DVC after the stage succeeded
    files = {folder / EVAL_DETAIL: canonical_json(detail).encode(),
             path: canonical_json(headline).encode(),
             folder / LOSS_PNG: loss_png(curve, heldout=heldout, job=p.job, scale=p.scale,
                                         labels=source.curve_labels)}
    check_room(files)
    for target, data in files.items():
        atomic_write_bytes(target, data)
    return path


if __name__ == "__main__":
    sys.exit(run("eval", eval_stage))
