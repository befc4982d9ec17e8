"""The headline of an eval (docs/outputs.md "eval.json"), whatever the data source."""
from __future__ import annotations

# The headline numbers a sweep compares: the DVC metric (eval.json) holds exactly
# these, flat, so `dvc exp show` stays a few columns wide. Everything else
# evaluate() returns (counts, per-family tables, samples, hashes) is the detail
# (eval_detail.json). A metric added later slots in by name here. A corpus job
# has `bpb` and the compressors' bits per byte on the same held-out bytes.
HEADLINE_KEYS = ("loss", "bpb", "bpb_sliding", "zlib9_bpb", "lzma9e_bpb", "perplexity",
                 "next_token_accuracy", "exact_match", "copy_recall")


def split_headline(metrics: dict) -> tuple[dict, dict]:
    """(headline, detail): the HEADLINE_KEYS that `metrics` has, and all the rest."""
    headline = {k: metrics[k] for k in HEADLINE_KEYS if k in metrics}
    return headline, {k: v for k, v in metrics.items() if k not in headline}
