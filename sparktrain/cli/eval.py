"""What is done with trained weights: `spark eval`, `spark generate`, `spark make-data`,
`spark plot`; `spark compare` and `spark repro-check`, which read the DVC pipeline's records;
`spark export` and `spark import` (the Hugging Face and GGUF formats)."""
from __future__ import annotations

import importlib
import json
import os
import sys

from sparktrain.core.errors import SparkError, printable, printable_lines
from sparktrain.eval.headline import HEADLINE_KEYS
from sparktrain.model.backend import DEVICES

TOKENIZER_HELP = ("tokenizer.json of a corpus or BPE pairs job (default: the one beside "
                  "--weights); its sha256 must be the one the weights record")
DEVICE_HELP = ("where the forward passes run: cpu (default, numpy), cuda or mps (the gpu "
               "extra), auto = a GPU when one is seen (docs/gpu.md)")
# The format -> its writer (module, function), imported when used; a writer returns the
# names of the files it wrote into a folder, or None for a single file.
WRITERS = {"hf": ("sparktrain.export.hf", "export_hf"),
           "gguf": ("sparktrain.export.gguf", "export_gguf")}


def register(sub) -> None:
    p = sub.add_parser("eval", help="held-out metrics of a weights file on a JSONL dataset",
                       description="Loss, perplexity, next-token accuracy, copy recall and exact "
                       "match (greedy generation) on a held-out JSONL file.")
    p.add_argument("--weights", required=True, help="weights.safetensors written by training")
    p.add_argument("--data", required=True, help="held-out JSONL (chat or prompt/completion rows)")
    p.add_argument("--json", action="store_true", help="print canonical JSON instead of a table")
    p.add_argument("--batch-size", type=int, default=64, help="rows per forward (default 64)")
    p.add_argument("--max-new", type=int, default=None,
                   help="generation cap (default: each expected completion's length + 1)")
    p.add_argument("--samples", type=int, default=3, help="generated samples to show (default 3)")
    p.add_argument("-o", "--out", default=None, help="also write the JSON to this file (atomic)")
    p.add_argument("--tokenizer", default=None, help=TOKENIZER_HELP)
    p.add_argument("--device", default="cpu", choices=DEVICES, help=DEVICE_HELP)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("generate", help="continue a prompt with a trained model",
                       description="Greedy (temperature 0) or sampled continuation, stopping at "
                       "EOS or after --max-new bytes.")
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
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("make-data", help="write the generated task-family datasets", description=(
        "Write data/train/dataset_scale.jsonl and data/eval/scale_heldout.jsonl (copy, reverse, "
        "upper, next, lookup); the same seed gives byte-identical files."))
    p.add_argument("--out-dir", default=".", help="project root to write under (default .)")
    p.add_argument("--seed", type=int, default=None, help="generator seed (default 0)")
    p.set_defaults(func=cmd_make_data)

    p = sub.add_parser("plot", help="draw a checkpoint's loss curve as a PNG", description=(
        "Training loss per outer pass (blue) and, with --eval, the held-out loss (red), titled "
        "with the checkpoint's job and scale."))
    p.add_argument("--checkpoint", required=True, help="out/train/JOB/checkpoint.json")
    p.add_argument("--eval", default=None,
                   help="eval JSON whose loss is drawn at the last outer pass")
    p.add_argument("-o", "--out", required=True, help="PNG file to write")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("compare", description=(
        "Training and held-out loss of the chosen experiments (default: every experiment of the "
        "workspace, as `dvc exp show` lists them, or a subset: --where, --last) on one PNG, the "
        "runs numbered, each legend entry naming the params that differ, and the same as a table "
        "that fits 80 columns. Reads the experiments' committed outputs from the DVC cache; works "
        "offline."), help="the loss curves of DVC experiments on one figure")
    p.add_argument("experiments", nargs="*", metavar="EXP",
                   help="experiment names or revs (a baseline by its branch name)")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="only the experiments whose param KEY (dotted, or its last part: "
                        "lr) is VALUE; repeat to ask for several")
    p.add_argument("--last", type=int, default=None, metavar="N",
                   help="only the last N experiments (newest)")
    p.add_argument("--json", action="store_true", help="print canonical JSON instead of a table")
    p.add_argument("-o", "--out", default=None,
                   help="PNG file to write (default out/compare.png under the project root, "
                        "from any subfolder)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "repro-check", help="dvc repro --force, then compare dvc.lock with the committed one",
        description="The reproducibility check to copy into CI. Exit 0 when every output "
                    "hash in dvc.lock is reproduced (or only float outputs moved, within "
                    "the tolerance: BLAS kernels differ between CPU families) and `dvc "
                    "status` is clean; 1 when something moved; 2 for a usage mistake.")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="relative tolerance for numbers in drifted float outputs (default 1e-4)")
    p.set_defaults(func=cmd_repro_check)

    p = sub.add_parser(
        "export", help="write trained weights as a Hugging Face Llama folder or a GGUF file",
        description="Export Spark weights for the Llama ecosystem: --to hf writes a folder "
                    "that transformers loads as LlamaForCausalLM (config, model.safetensors, "
                    "tokenizer); --to gguf writes one file llama.cpp runs.")
    p.add_argument("out", metavar="OUT", help="output folder (hf) or .gguf file (gguf)")
    p.add_argument("--to", required=True, choices=tuple(WRITERS), help="the format to write")
    p.add_argument("--weights", required=True, help="Spark weights.safetensors to export")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json the model was trained with (default: the job's "
                        "tokenizer.json beside --weights when the weights record one, "
                        "checked by sha256; else the byte tokenizer, id = byte value)")
    p.add_argument("--force", action="store_true",
                   help="replace OUT when it exists and is not empty")
    p.set_defaults(func=_export)

    p = sub.add_parser(
        "import", help="turn a Hugging Face Llama folder into Spark weights",
        description="Read a Llama-compatible Hugging Face folder (config.json + "
                    "model.safetensors) and write Spark weights, a base for further training.")
    p.add_argument("folder", metavar="DIR", help="the Hugging Face model folder")
    p.add_argument("--from", dest="source", required=True, choices=("hf",),
                   help="the format to read")
    p.add_argument("--out", required=True, help="Spark weights file to write")
    p.add_argument("--force", action="store_true", help="replace --out when it exists")
    p.set_defaults(func=_import)


def _read_json(path, what: str):
    from sparktrain.core.fsutil import read_input
    from sparktrain.core.safeload import load_json

    return load_json(read_input(path, what), f"{what} {path}")


def _positive(value: int, flag: str) -> None:
    if value < 1:
        raise SparkError(f"{flag} must be at least 1, got {value}")


def _on_device(args, params):
    """The weights on --device (host float32 on disk whatever device wrote them);
    a device that cannot be had is one line before any work."""
    from sparktrain.model.backend import resolve

    device = resolve(args.device)
    if device.note:
        print(f"spark: {device.note}", file=sys.stderr)
    return device.to_device(params)


def cmd_eval(args) -> int:
    from sparktrain.core.fsutil import canonical_json, write_json
    from sparktrain.core.gate import check_output
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
    pairs, data_sha256 = read_pairs(args.data)
    params, cfg, meta = load_model(args.weights)
    tok = tokenizer_for(args.weights, meta, cfg.vocab, args.tokenizer)
    if not trained_on(meta).prompted and tok.kind != "byte":
        raise SparkError(f"{args.weights} is a corpus model of {tok.vocab} BPE tokens; spark "
                         "eval scores JSONL pairs with a pairs model (a corpus job's held-out "
                         "bits per byte are in its eval.json)")
    params = _on_device(args, params)
    result = evaluate(params, cfg, pairs, batch_size=args.batch_size, max_new=args.max_new,
                      n_samples=args.samples, tokenizer=tok)
    result.update(data=str(args.data), data_sha256=data_sha256, weights=str(args.weights))
    if out is not None:
        write_json(out, result)
    sys.stdout.write(canonical_json(result) if args.json else printable_lines(format_table(result)))
    return 0


def format_table(m: dict) -> str:
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
    from sparktrain.model.build import MAX_NEW

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
    if pairs:
        [text] = generate(params, cfg, [args.prompt], tokenizer=tok, **sampling)
    else:
        [text] = continue_text(params, cfg, tok, [args.prompt], **sampling)
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
        print(f"wrote {path} ({rows} rows)")
    return 0


def cmd_plot(args) -> int:
    from sparktrain.core.gate import check_output
    from sparktrain.eval.plot import heldout_points, scale_label, write_loss_png
    from sparktrain.train.outputs import number

    out = check_output(args.out, "png", (args.checkpoint, args.eval))
    ckpt = _read_json(args.checkpoint, "checkpoint")
    curve = ckpt.get("loss_curve") if isinstance(ckpt, dict) else None
    if not isinstance(curve, list) or not curve:
        raise SparkError(f"checkpoint {args.checkpoint} has no 'loss_curve' list")
    for i, point in enumerate(curve):
        if number(point.get("loss") if isinstance(point, dict) else None) is None:
            raise SparkError(f"checkpoint {args.checkpoint}: loss_curve[{i}] has no finite "
                             "'loss' number")
    heldout = heldout_points(_read_json(args.eval, "eval file"), curve, args.eval) \
        if args.eval else None
    job = ckpt.get("job") if isinstance(ckpt.get("job"), str) else None
    write_loss_png(out, curve, heldout, job=job, scale=scale_label(ckpt.get("arch")))
    print(f"wrote {args.out}")
    return 0


def cmd_compare(args) -> int:
    from sparktrain.core.fsutil import canonical_json
    from sparktrain.core.gate import check_output
    from sparktrain.core.jobfiles import OUT, find_root
    from sparktrain.eval.compare.plot import write_png
    from sparktrain.eval.compare.runs import as_json, compare
    from sparktrain.eval.compare.table import format_table

    args.out = args.out or os.path.relpath(find_root() / OUT / "compare.png")
    out = check_output(args.out, "png")
    sweep = compare(args.experiments, where=args.where, last=args.last)
    for exp in sweep["experiments"]:
        if exp.old_layout:
            print(f"spark: note: experiment {exp.name} has the eval.json layout from before "
                  f"eval_detail.json; its headline numbers are read from it", file=sys.stderr)
    write_png(out, sweep)
    if args.json:
        sys.stdout.write(canonical_json(as_json(sweep)))
    else:
        sys.stdout.write(printable_lines(format_table(sweep)))
        print(f"\nwrote {args.out}")
    return 0


def cmd_repro_check(args) -> int:
    from sparktrain.repro.check import check

    if not args.tolerance >= 0:
        raise SparkError(f"--tolerance must be >= 0, got {args.tolerance}")
    return check(args.tolerance)


def _export(args) -> int:
    from sparktrain.core.progress import Progress

    module, name = WRITERS[args.to]
    write = getattr(importlib.import_module(module), name)
    with Progress("export", total=1, unit=f"{args.to} written") as bar:
        names = write(args.weights, args.out, args.tokenizer, args.force)
        bar.advance(note=args.out)
        print(f"wrote {args.out}: {', '.join(names)}" if names else f"wrote {args.out}")
    return 0


def _import(args) -> int:
    from sparktrain.export.hf import import_hf

    arch = import_hf(args.folder, args.out, args.force)["arch"]
    print(f"wrote {args.out}: dim {arch['dim']}, {arch['n_layer']} layers, "
          f"{arch['n_head']} heads, {arch['n_kv_head']} kv heads, seq_len {arch['seq_len']}")
    return 0
