"""The headline of an eval (docs/outputs.md "eval.json"), whatever the data source, and
what a number of it is."""
from __future__ import annotations

import math

# The headline numbers a sweep compares: eval.json (the DVC metric) holds exactly these,
# flat; the rest of an eval is eval_detail.json. A new metric slots in by name here.
HEADLINE_KEYS = ("loss", "bpb", "bpb_sliding", "zlib9_bpb", "lzma9e_bpb", "lzma9e_primed_bpb",
                 "ppmd_bpb", "ppmd_primed_bpb", "perplexity",
                 "next_token_accuracy", "exact_match", "copy_recall")


def split_headline(metrics: dict) -> tuple[dict, dict]:
    """(headline, detail): the HEADLINE_KEYS that `metrics` has, and all the rest."""
    headline = {k: metrics[k] for k in HEADLINE_KEYS if k in metrics}
    return headline, {k: v for k, v in metrics.items() if k not in headline}


def is_number(v) -> bool:
    """A JSON number: an int or a float, never a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_finite(v) -> bool:
    return is_number(v) and math.isfinite(v)
