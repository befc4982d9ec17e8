"""A trained model scored on its data source's held-out data (the eval stage's eval.json,
`spark eval`, what a Spark-coder run learned): a prompted source on eval.data's pairs
(data/pairs_score.py), a streamed one on its whole prepared held-out stream (here).

The sources themselves (data/source.py) read, tokenize and prepare data and never build a
model, so the stages that only do that do not depend on the model's code (docs/pipeline.md,
"Deps")."""
from __future__ import annotations

import math
from pathlib import Path

from sparktrain.core.errors import SparkError
from sparktrain.data.base import DataSource, bits_per_byte, measure
from sparktrain.data.baselines import BASELINE_ORDERS, BPB_SUFFIX
from sparktrain.data.corpus import read_prepared, sliding_batches, stream_batches
from sparktrain.data.pairs import load_pairs
from sparktrain.data.pairs_score import evaluate
from sparktrain.data.source import STREAM_BATCH
from sparktrain.model.build import build_model


def heldout_metrics(source: DataSource, folder, params, cfg, tokenizer,
                    tokenizer_sha256: str | None, eval_cfg, dynamic=None) -> dict:
    """The weights `params` on `source`'s held-out data: loss, accuracy, copy recall and exact
    match on eval.data's pairs for a prompted source; for a streamed one the whole held-out
    stream under `folder` (corpus/), every target once: loss and bits per byte beside the
    compressors, in windows apart (`bpb`) and every eval.stride tokens (`bpb_sliding`), and
    when eval.dynamic_lr is set, learning while it scores (`bpb_dynamic`): `dynamic`, the
    scorer eval/dynamic.py's heldout_dynamic (the optimizers it steps live above data/)."""
    if source.prompted:
        metrics = evaluate(params, cfg, load_pairs(eval_cfg.data),
                           batch_size=eval_cfg.batch_size, max_new=eval_cfg.max_new,
                           n_samples=eval_cfg.n_samples, tokenizer=tokenizer)
        metrics["data"] = eval_cfg.data
        return metrics
    data = read_prepared(Path(folder), tokenizer_sha256)
    model = build_model(cfg)
    stride = sliding_stride(eval_cfg, cfg.seq_len)
    total, count = _stream_score(model, params, data, tokenizer, stream_batches(
        data.val, cfg.seq_len, STREAM_BATCH, tokenizer.eos))
    sliding, _ = _stream_score(model, params, data, tokenizer, sliding_batches(
        data.val, cfg.seq_len, stride, STREAM_BATCH, tokenizer.eos))
    loss, nbytes = total / count, data.heldout_bytes
    base = data.manifest["heldout_baselines"]
    return {"mode": source.kind, "loss": loss, "perplexity": math.exp(loss),
            "bpb": bits_per_byte(total, nbytes),
            "bpb_sliding": bits_per_byte(sliding, nbytes), "sliding_stride": stride,
            **{k: v for k, v in base.items() if k.endswith(BPB_SUFFIX)},
            **{k: base[k] for k in BASELINE_ORDERS},
            "heldout_bytes": base["bytes"],
            "heldout_targets": count, "tokenizer": tokenizer.kind, "vocab": tokenizer.vocab,
            **(_dynamic(dynamic, model, params, data, tokenizer, cfg.seq_len, eval_cfg, stride,
                        count) if eval_cfg.dynamic_lr else {})}


def _dynamic(dynamic, model, params, data, tokenizer, seq_len, eval_cfg, stride, count) -> dict:
    """bpb_dynamic and its record, scored by `dynamic`, every target the static one scored."""
    if dynamic is None:
        raise SparkError("eval.dynamic_lr is set, and this command has no dynamic scorer")
    got = dynamic(model, params, data, tokenizer, seq_len, eval_cfg, stride)
    if got["targets"] != count:
        raise SparkError(f"dynamic evaluation scored {got['targets']} targets, the static "
                         f"score {count}")
    return {"bpb_dynamic": got["bpb"], "dynamic": got["record"]}


def _stream_score(model, params, data, tokenizer, batches) -> tuple[float, int]:
    """(summed nats, targets) of batches that count every held-out target once."""
    batches = list(batches)
    total, count, nbytes = measure([model.batch_loss(params, b) for b in batches], batches,
                                   tokenizer.byte_lengths())
    if nbytes != data.heldout_bytes:
        raise SparkError(f"held-out tokens stand for {nbytes} bytes, the corpus has "
                         f"{data.heldout_bytes}; run the prepare stage again")
    return total, count


def sliding_stride(eval_cfg, seq_len: int) -> int:
    """eval.stride, default a quarter of the window; at most seq_len."""
    stride = eval_cfg.stride or max(seq_len // 4, 1)
    if stride > seq_len:
        raise SparkError(f"eval.stride {stride} is above seq_len {seq_len}")
    return stride
