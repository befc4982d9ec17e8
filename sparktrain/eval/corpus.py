"""Held-out metrics of a corpus job: bits per byte beside the compressors."""
from __future__ import annotations

import math

from sparktrain.errors import SparkError


def corpus_metrics(checkpoint: dict, weights_meta: dict) -> dict:
    """eval.json of a corpus job, from the step's whole-held-out-stream score."""
    if weights_meta.get("tokenizer_sha256") != checkpoint.get("tokenizer_sha256"):
        raise SparkError("the weights were trained with another tokenizer.json than the "
                         "checkpoint records; run the step stage again")
    base = checkpoint["heldout_baselines"]
    loss = checkpoint["heldout_loss"]
    return {"mode": "corpus", "loss": loss, "perplexity": math.exp(loss),
            "bpb": checkpoint["heldout_bpb"], "zlib9_bpb": base["zlib9_bpb"],
            "lzma9e_bpb": base["lzma9e_bpb"], "heldout_bytes": base["bytes"],
            "heldout_targets": checkpoint["heldout_targets"],
            "tokenizer": checkpoint["tokenizer"], "vocab": checkpoint["arch"]["vocab"]}
