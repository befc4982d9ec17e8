"""What a model says: `spark eval` (held-out metrics of a weights file), `spark generate`
(a continuation of a prompt) and `spark make-data` (the generated task datasets it is
trained and scored on)."""
from __future__ import annotations

import json
import os
import sys

from sparktrain.core.errors import SparkError, printable, printable_lines
from sparktrain.core.fsutil import canonical_json, write_json
from sparktrain.core.gate import check_output
from sparktrain.core.metric_keys import HEADLINE_KEYS
from sparktrain.model.device import DEVICES, resolve

TOKENIZER_HELP = ("tokenizer.json of a corpus or BPE pairs job (default: the one beside "
                  "--weights); its sha256 must be the one the weights record")
DEVICE_HELP = ("where the forward passes run: cpu (default, numpy), cuda or mps (the gpu "
               "extra), auto = a GPU when one is seen (docs/gpu.md)")


def register(sub) -> None:
    add_eval(sub)
    add_generate(sub)
    add_make_data(sub)


def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="held-out metrics of a weights file on a JSONL dataset",
                       description="Loss, perplexity, next-token accuracy, copy recall and exact "
                       "match (greedy generation) on a held-out JSONL file.", func=cmd_eval)
    p.add_argument("--weights", required=True, help="weights.safetensors written by training")
    p.add_argument("--data", default=None,
                   help="held-out JSONL (chat or prompt/completion rows) of a pairs model; a "
                        "corpus or text model is scored without it, on the held-out split "
                        "prepared beside its weights (corpus/)")
    p.add_argument("--json", action="store_true", help="print canonical JSON instead of a table")
    p.add_argument("--batch-size", type=int, default=64, help="rows per forward (default 64)")
    p.add_argument("--max-new", type=int, default=None,
                   help="generation cap (default: each expected completion's length + 1)")
    p.add_argument("--samples", type=int, default=3, help="generated samples to show (default 3)")
    p.add_argument("-o", "--out", default=None, help="also write the JSON to this file (atomic)")
    p.add_argument("--tokenizer", default=None, help=TOKENIZER_HELP)
    p.add_argument("--device", default="cpu", choices=DEVICES, help=DEVICE_HELP)
    dyn = p.add_argument_group("dynamic evaluation of a corpus model (eval.dynamic_*: "
                               "docs/training.md \"Dynamic evaluation\")")
    dyn.add_argument("--dynamic-lr", type=float, default=None, metavar="LR",
                     help="learn while scoring at this rate (bpb_dynamic); unset = off")
    dyn.add_argument("--dynamic-rule", default=None, choices=("rms", "sgd", "adamw"),
                     help="the update (default rms)")
    dyn.add_argument("--dynamic-decay", type=float, default=None, metavar="D",
                     help="the pull back towards the trained weights (default 0)")
    dyn.add_argument("--dynamic-stride", type=int, default=None, metavar="TOKENS",
                     help="tokens a piece (default: the sliding stride)")


def add_generate(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt with a trained model",
                       description="Greedy (temperature 0) or sampled continuation, stopping at "
                       "EOS or after --max-new tokens (bytes for a byte model).",
                       func=cmd_generate)
    p.add_argument("--weights", required=True, help="weights.safetensors written by training")
    p.add_argument("--max-new", type=int, default=64,
                   help="most tokens (bytes for a byte model) to generate (default 64, "
                        "at most 4096)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k likeliest (0 = all)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--raw", action="store_true",
                   help="print the text exactly, control bytes included, even on a terminal "
                        "(when stdout is not a terminal it always is)")
    p.add_argument("--tokenizer", default=None, help=TOKENIZER_HELP)
    p.add_argument("--device", default="cpu", choices=DEVICES, help=DEVICE_HELP)
    p.add_argument("prompt", help="the user text (a corpus model: the text to continue)")


def add_make_data(sub) -> None:
    p = sub.add_parser("make-data", help="write the generated task-family datasets", description=(
        "Write data/train/dataset_scale.jsonl and data/eval/scale_heldout.jsonl (copy, reverse, "
        "upper, next, lookup); the same seed gives byte-identical files."), func=cmd_make_data)
    p.add_argument("--out-dir", default=".", help="project root to write under (default .)")
    p.add_argument("--seed", type=int, default=None, help="generator seed (default 0)")


def _positive(value: int, flag: str) -> None:
    if value < 1:
        raise SparkError(f"{flag} must be at least 1, got {value}")


def _on_device(args, params):
    """The weights on --device (host float32 on disk whatever device wrote them);
    a device that cannot be had is one line before any work."""
    device = resolve(args.device)
    if device.note:
        print(f"spark: {device.note}", file=sys.stderr)
    return device.to_device(params)


def cmd_eval(args) -> int:
    from sparktrain.data.pairs import read_pairs
    from sparktrain.data.pairs_score import evaluate
    from sparktrain.data.source import trained_on
    from sparktrain.data.tokenizer import tokenizer_for
    from sparktrain.model.weights import load_model

    _positive(args.batch_size, "--batch-size")
    if args.max_new is not None:
        _positive(args.max_new, "--max-new")
        args.max_new = _cap_max_new(args.max_new)
    if args.samples < 0:
        _positive(args.samples, "--samples")
    out = None  # the output gate (sparktrain/core/gate.py) before any work: where to write
    if args.out:
        out = check_output(args.out, "json", (args.weights, args.data, args.tokenizer))
    params, cfg, meta = load_model(args.weights)
    tok = tokenizer_for(args.weights, meta, cfg.vocab, args.tokenizer)
    if not trained_on(meta).prompted:
        if args.data:
            raise SparkError(f"{args.weights} is a corpus model; it is scored on the held-out "
                             f"split prepared beside it: drop --data")
        return _eval_corpus(args, out, params, cfg, meta)
    if not args.data:
        raise SparkError(f"{args.weights} is a pairs model: give its held-out JSONL with --data")
    if args.dynamic_lr is not None:
        raise SparkError(f"{args.weights} is a pairs model: dynamic evaluation scores a corpus "
                         f"model's held-out stream; drop --dynamic-lr")
    pairs, data_sha256 = read_pairs(args.data)
    params = _on_device(args, params)
    result = evaluate(params, cfg, pairs, batch_size=args.batch_size, max_new=args.max_new,
                      n_samples=args.samples, tokenizer=tok)
    result.update(data=str(args.data), data_sha256=data_sha256, weights=str(args.weights))
    if out is not None:
        write_json(out, result)
    sys.stdout.write(canonical_json(result) if args.json else printable_lines(eval_report(result)))
    return 0


def _eval_corpus(args, out, params, cfg, meta) -> int:
    """A corpus or text model on the held-out split of its job folder (corpus/, written by
    the prepare stage or `spark train`): the eval stage's bits per byte, outside DVC."""
    from pathlib import Path

    from sparktrain.core.jobfiles import CORPUS, TOKENIZER
    from sparktrain.data.heldout import heldout_metrics
    from sparktrain.eval.dynamic import heldout_dynamic
    from sparktrain.data.source import CorpusSource
    from sparktrain.data.tokenizer import read_tokenizer
    from sparktrain.params import EvalConfig, override

    folder = Path(args.weights).parent
    if not (folder / CORPUS).is_dir():
        raise SparkError(f"no {folder / CORPUS} beside {args.weights}: a corpus model is scored "
                         f"on its job folder's prepared held-out split")
    tok, tok_sha256 = read_tokenizer(args.tokenizer or folder / TOKENIZER,
                                     meta.get("tokenizer_sha256"), args.weights)
    source = CorpusSource(str(meta.get("dataset", "")), (), 0.1)  # scored on corpus/ only
    eval_cfg = override(EvalConfig(), dynamic_lr=args.dynamic_lr, dynamic_rule=args.dynamic_rule,
                        dynamic_decay=args.dynamic_decay, dynamic_stride=args.dynamic_stride)
    result = heldout_metrics(source, folder / CORPUS, _on_device(args, params), cfg, tok,
                             tok_sha256, eval_cfg, heldout_dynamic)
    result.update(weights=str(args.weights))
    if out is not None:
        write_json(out, result)
    sys.stdout.write(canonical_json(result) if args.json else printable_lines(
        f"eval {args.weights}: the held-out split ({result['heldout_bytes']:,} bytes, "
        f"{result['heldout_targets']:,} tokens)\n"
        f"  bpb {result['bpb']:.4f}  (sliding, stride {result['sliding_stride']}: "
        f"{result['bpb_sliding']:.4f})\n"
        + (f"  dynamic {result['bpb_dynamic']:.4f}  ({result['dynamic']['rule']} at "
           f"{result['dynamic']['lr']:g}, {result['dynamic']['updates']:,} updates)\n"
           if "bpb_dynamic" in result else "") +
        f"  zlib-9 {result['zlib9_bpb']:.4f}  lzma-9e {result['lzma9e_bpb']:.4f}\n"
        f"  loss {result['loss']:.4f}  perplexity {result['perplexity']:.2f}\n"))
    return 0


def eval_report(m: dict) -> str:
    def num(v):
        return "-" if v is None else f"{v:.4f}"

    lines = [f"eval {m['data']}  ({m['n']} rows, {m['n_counted']} counted targets, "
             f"{m['mode']} model, {m['n_truncated']} truncated)"]
    for key in (k for k in HEADLINE_KEYS if k in m):
        extra = f"  ({m['n_copy_probes']} copy probes)" if key == "copy_recall" else ""
        lines.append(f"  {key:<20} {num(m[key])}{extra}")
    lines += ["", f"  {'family':<10} {'n':>5} {'loss':>8} {'acc':>7} {'exact':>7}"]
    for name, f in m["families"].items():
        lines.append(f"  {name:<10} {f['n']:>5} {f['loss']:>8.4f} "
                     f"{f['next_token_accuracy']:>7.3f} {f['exact_match']:>7.3f}")
    if m["samples"]:
        lines += ["", "  samples (prompt -> expected | generated):"]
        for s in m["samples"]:
            lines.append(f"    {json.dumps(s['prompt'])} -> {json.dumps(s['expected'])} | "
                         f"{json.dumps(s['generated'])}")
    return "\n".join(lines) + "\n"


def _cap_max_new(value: int) -> int:
    from sparktrain.model.sampling import MAX_NEW

    if value > MAX_NEW:
        print(f"spark: note: --max-new {value} capped at {MAX_NEW}", file=sys.stderr)
        return MAX_NEW
    return value


def cmd_generate(args) -> int:
    from sparktrain.data.source import trained_on
    from sparktrain.data.tokenizer import tokenizer_for
    from sparktrain.eval.generate import continue_text, corpus_context, generate, prompt_context
    from sparktrain.model.build import build_model
    from sparktrain.model.weights import load_model

    _positive(args.max_new, "--max-new")
    args.max_new = _cap_max_new(args.max_new)
    if args.seed < 0:
        raise SparkError(f"--seed must be >= 0, got {args.seed}")
    params, cfg, meta = load_model(args.weights)
    tok = tokenizer_for(args.weights, meta, cfg.vocab, args.tokenizer)
    pairs = trained_on(meta).prompted
    if pairs:  # [BOS] prompt [SEP], then the completion (bytes or the job's BPE ids)
        _, truncated = prompt_context(args.prompt, cfg.seq_len, tok)  # rejects an empty prompt
    else:            # a corpus model continues the text
        _, truncated = corpus_context(tok, args.prompt, cfg.seq_len)
    if truncated:
        print(f"spark: note: prompt is longer than the {cfg.seq_len}-token context; "
              f"keeping its last {cfg.seq_len} tokens", file=sys.stderr)
    model = build_model(cfg)
    if model.max_new_tokens is not None:
        print(f"spark: note: {model.name} model, it predicts at most {model.max_new_tokens} "
              f"byte(s)", file=sys.stderr)
    sampling = dict(max_new=args.max_new, temperature=args.temperature, top_k=args.top_k,
                    seed=args.seed)
    params = _on_device(args, params)
    made: list = []
    if pairs:
        [text] = generate(params, cfg, [args.prompt], tokenizer=tok, tokens_out=made, **sampling)
    else:
        [text] = continue_text(params, cfg, tok, [args.prompt], tokens_out=made, **sampling)
    n = len(made[0])
    unit = "byte" if tok.kind == "byte" else "token"
    cap = model.max_new_tokens
    why = (f"--max-new {args.max_new} reached" if n >= args.max_new else
           f"the {model.name} model predicts at most {cap}" if cap is not None and n >= cap
           else "the model's end-of-text token (EOS) came next")
    print(f"spark: note: {n} {unit}{'s' * (n != 1)} generated; stopped: {why}", file=sys.stderr)
    # on a terminal, control bytes are shown escaped, never executed
    print(text if args.raw or not sys.stdout.isatty() else printable(text, keep="\n\t"))
    return 0


def cmd_make_data(args) -> int:
    from sparktrain.data.tasks import DEFAULT_SEED, write_scale_data

    seed = DEFAULT_SEED if args.seed is None else args.seed
    if seed < 0:
        raise SparkError(f"--seed must be >= 0, got {seed}")
    for path in write_scale_data(args.out_dir, seed):
        with open(path, "rb") as f:
            rows = f.read().count(b"\n")
        print(f"wrote {printable(os.fspath(path))} ({rows} rows)")
    return 0
