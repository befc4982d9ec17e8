"""The headline of an eval (docs/outputs.md "eval.json"), whatever the data source (what a
number of it is: sparktrain/core/values.py)."""
from __future__ import annotations

# The headline numbers a sweep compares: eval.json (the DVC metric) holds exactly these,
# flat; the rest of an eval is eval_detail.json. A new metric slots in by name here.
HEADLINE_KEYS = ("loss", "bpb", "bpb_sliding", "zlib9_bpb", "lzma9e_bpb", "lzma9e_primed_bpb",
                 "ppmd_bpb", "ppmd_primed_bpb", "perplexity",
                 "next_token_accuracy", "exact_match", "copy_recall")


def split_headline(metrics: dict) -> tuple[dict, dict]:
    """(headline, detail): the HEADLINE_KEYS that `metrics` has, and all the rest."""
    headline = {k: metrics[k] for k in HEADLINE_KEYS if k in metrics}
    return headline, {k: v for k, v in metrics.items() if k not in headline}

