"""The metric keys, one table of them: the headline of an eval (docs/outputs.md
"eval.json"), whatever the data source, the compressor baselines among them, the short
heads and the model card's choice (what a number of it is: sparktrain/core/values.py)."""
from __future__ import annotations

# The compressors' bits per held-out byte (data/baselines.py) and each one's name on a
# picture: cold, then lzma and PPMd primed with the train split
BASELINE_BPB = {"zlib9_bpb": "zlib-9", "lzma9e_bpb": "lzma-9e",
                "lzma9e_primed_bpb": "lzma-9e primed", "ppmd_bpb": "PPMd",
                "ppmd_primed_bpb": "PPMd primed"}
# The headline numbers a sweep compares: eval.json (the DVC metric) holds exactly these,
# flat; the rest of an eval is eval_detail.json. A new metric slots in by name here.
HEADLINE_KEYS = ("loss", "bpb", "bpb_sliding", "bpb_dynamic", *BASELINE_BPB, "perplexity",
                 "next_token_accuracy", "exact_match", "copy_recall")
# Short heads keep `spark compare`'s table inside 80 columns.
SHORT_HEADS = {"loss": "held-out", "bpb": "bpb", "bpb_sliding": "sliding", "bpb_dynamic": "dynamic",
               "zlib9_bpb": "zlib9", "lzma9e_bpb": "lzma9e",
               "lzma9e_primed_bpb": "lzma9e+", "ppmd_bpb": "ppmd", "ppmd_primed_bpb": "ppmd+",
               "perplexity": "ppl", "next_token_accuracy": "acc", "exact_match": "exact",
               "copy_recall": "copy"}
# What a model card shows (export/card.py): the held-out figures in its order, then the
# cold zlib and lzma beside them
CARD_KEYS = ("loss", "perplexity", "bpb", "next_token_accuracy", "exact_match", "copy_recall")
CARD_BASELINES = ("zlib9_bpb", "lzma9e_bpb")


def split_headline(metrics: dict) -> tuple[dict, dict]:
    """(headline, detail): the HEADLINE_KEYS that `metrics` has, and all the rest."""
    headline = {k: metrics[k] for k in HEADLINE_KEYS if k in metrics}
    return headline, {k: v for k, v in metrics.items() if k not in headline}

