"""Choose dynamic evaluation's settings on a slice of the TRAIN split, never on the held-out
bytes (docs/training.md "Dynamic evaluation"): a trained corpus job's weights score the slice
with each setting of a small grid, learning while they score, and the table says which
setting coded the slice in the fewest bits per byte.

    python tools/dynamic_tune.py out/train/job-coder-001 [--tokens 40000]
        [--rule rms --rule sgd] [--lr 0.001 --lr 0.003] [--decay 0 --decay 0.01]
        [--stride 64] [--json out.json]

The slice: `--tokens` tokens from the middle of the train stream (train.bin, the files in
path order), whole pieces. The train split was read during training, so its figures are
lower than the held-out ones and favour small rates: the grid's ranking is what is used.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()

from sparktrain.core.errors import SparkError
from sparktrain.core.jobfiles import CORPUS, TOKENIZER, WEIGHTS
from sparktrain.data.corpus import read_prepared
from sparktrain.data.tokenizer import read_tokenizer
from sparktrain.eval.dynamic import DynamicSettings, dynamic_score, mean_squares
from sparktrain.model.build import build_model
from sparktrain.model.weights import load_model


def train_slice(train, tokens: int):
    """`tokens` tokens from the middle of the train stream."""
    start = max((len(train) - tokens) // 2, 0)
    return train[start:start + tokens]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", help="a trained corpus job's folder (out/train/<job>)")
    ap.add_argument("--tokens", type=int, default=40_000, help="the slice's length in tokens")
    ap.add_argument("--rule", action="append", help="update rule(s) (default: rms)")
    ap.add_argument("--lr", type=float, action="append", help="rate(s) to try")
    ap.add_argument("--decay", type=float, action="append", help="decay(s) to try")
    ap.add_argument("--stride", type=int, action="append", help="piece length(s) in tokens")
    ap.add_argument("--json", help="write the table as JSON here")
    args = ap.parse_args(argv)
    folder = Path(args.job)
    tok, tok_sha = read_tokenizer(folder / TOKENIZER)
    params, cfg, _ = load_model(folder / WEIGHTS)
    data = read_prepared(folder / CORPUS, tok_sha)
    model = build_model(cfg)
    piece = train_slice(data.train, args.tokens)
    lengths = tok.byte_lengths()
    rows = []
    ms_of = {}
    for rule, lr, decay, stride in itertools.product(
            args.rule or ["rms"], args.lr or [0.001], args.decay or [0.0],
            args.stride or [cfg.seq_len // 2]):
        settings = DynamicSettings(rule, lr, decay, stride)
        if rule == "rms" and stride not in ms_of:  # the scale on the whole train stream
            ms_of[stride] = mean_squares(model, params, data.train, cfg.seq_len, stride, tok.eos)
        t0 = time.perf_counter()
        got = dynamic_score(model, params, piece, cfg.seq_len, settings, lengths, tok.eos,
                            ms_of.get(stride))
        rows.append({**got.record(settings), "bpb": got.bpb,
                     "seconds": round(time.perf_counter() - t0, 1)})
        print(f"{rule:5s} lr {lr:<8g} decay {decay:<6g} stride {stride:<4d} "
              f"bpb {got.bpb:.4f}  ({rows[-1]['seconds']} s)", flush=True)
    static = dynamic_score(model, params, piece, cfg.seq_len,
                           DynamicSettings("sgd", 0.0, 0.0, min(r["stride"] for r in rows)),
                           lengths, tok.eos)
    best = min(rows, key=lambda r: r["bpb"])
    print(f"static (no update) {static.bpb:.4f}; best {best}")
    if args.json:
        Path(args.json).write_text(json.dumps({"slice_tokens": len(piece), "static": static.bpb,
                                               "rows": rows, "best": best}, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SparkError as err:
        print(f"dynamic_tune: error: {err}", file=sys.stderr)
        sys.exit(2)
