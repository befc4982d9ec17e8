"""What is measured and done with a model: `spark bench` (training speed), `spark eval`,
`spark generate`, `spark make-data`, `spark plot`; `spark compare` and `spark repro-check`,
which read the DVC pipeline's records; `spark export` and `spark import` (the Hugging Face
and GGUF formats); `spark sweep`, a grid of DVC experiments on a Dask cluster."""
from __future__ import annotations

import importlib
import json
import os
import sys

from sparktrain.cli import add_cluster_flags, check_cluster_flags, positive_int
from sparktrain.core.errors import SparkError, printable, printable_lines
from sparktrain.core.fsutil import canonical_json, read_input, write_json
from sparktrain.core.gate import check_output
from sparktrain.core.jobfiles import OUT, find_root
from sparktrain.core.safeload import load_json
from sparktrain.eval.headline import HEADLINE_KEYS
from sparktrain.model.backend import DEVICES, resolve
from sparktrain.model.config import SCALES
from sparktrain.params import (StepConfig, load_params, load_params_or_defaults, model_config,
                               override)

# step.optimizer's choices, from the schema (sparktrain/params.py)
OPTIMIZERS = tuple(StepConfig.__pydantic_fields__["optimizer"].annotation.__args__)
TOKENIZER_HELP = ("tokenizer.json of a corpus or BPE pairs job (default: the one beside "
                  "--weights); its sha256 must be the one the weights record")
DEVICE_HELP = ("where the forward passes run: cpu (default, numpy), cuda or mps (the gpu "
               "extra), auto = a GPU when one is seen (docs/gpu.md)")
# The format -> its writer (module, function), imported when used; a writer returns the
# names of the files it wrote into a folder, or None for a single file.
WRITERS = {"hf": ("sparktrain.export.hf", "export_hf"),
           "gguf": ("sparktrain.export.gguf", "export_gguf")}


def register(sub) -> None:
    p = sub.add_parser("bench", help="time training micro-steps and report model FLOP/s "
                       "utilisation", description=(
        "Time loss_and_grads + the update on synthetic full-length batches and report tokens/s "
        "and model FLOP/s over the float32 matmul peak of this process. With --params FILE, the "
        "job of that params file: its scale, vocabulary, batch, optimizer, clip, schedule and "
        "shards (flags override)."), func=_bench)
    p.add_argument("--scale", default=None,
                   help=f"a built-in scale ({', '.join(SCALES)}) or a row of --params' "
                        f"scales (default: --params' scale, else tiny)")
    p.add_argument("--params", default=None,
                   help="a params file (e.g. data/programs/coder-proof.yaml): bench its job "
                        "(default: only ./params.yaml's scales table, when it exists)")
    p.add_argument("--vocab", type=positive_int, default=None,
                   help="vocabulary size, the LM head's width (default: --params' tokenizer, "
                        "else 256 bytes)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="the job's update (clip, optimizer, schedule) instead of plain SGD "
                        "(default: --params' optimizer, else plain SGD)")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="sequences per step (default: --params' batch_size, else "
                        "tiny 8, large and medium 16)")
    p.add_argument("--steps", type=positive_int, default=10,
                   help="timed steps after warm-up (default 10)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="data-parallel workers: time 1 worker against N at one shard count, "
                        "in interleaved rounds, and report the scaling")
    p.add_argument("--shards", type=positive_int, default=None,
                   help="fixed gradient shards per step (default: --params' step.shards, "
                        "else --workers, else 1)")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="interleaved rounds with --workers (default 3)")
    p.add_argument("--device", default="cpu", choices=DEVICES,
                   help="cpu (numpy, default), cuda, mps or auto (a GPU needs the gpu extra: "
                        "pip install -e '.[gpu]'; docs/gpu.md)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")

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

    p = sub.add_parser("generate", help="continue a prompt with a trained model",
                       description="Greedy (temperature 0) or sampled continuation, stopping at "
                       "EOS or after --max-new bytes.", func=cmd_generate)
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

    p = sub.add_parser("make-data", help="write the generated task-family datasets", description=(
        "Write data/train/dataset_scale.jsonl and data/eval/scale_heldout.jsonl (copy, reverse, "
        "upper, next, lookup); the same seed gives byte-identical files."), func=cmd_make_data)
    p.add_argument("--out-dir", default=".", help="project root to write under (default .)")
    p.add_argument("--seed", type=int, default=None, help="generator seed (default 0)")

    p = sub.add_parser("plot", help="draw a checkpoint's loss curve as a PNG", description=(
        "Training loss per outer pass (blue) and, with --eval, the held-out loss (red), titled "
        "with the checkpoint's job and scale."), func=cmd_plot)
    p.add_argument("--checkpoint", required=True, help="out/train/JOB/checkpoint.json")
    p.add_argument("--eval", default=None,
                   help="eval JSON whose loss is drawn at the last outer pass")
    p.add_argument("-o", "--out", required=True, help="PNG file to write")

    p = sub.add_parser("compare", description=(
        "Training and held-out loss of the chosen experiments (default: every experiment of the "
        "workspace, as `dvc exp show` lists them, or a subset: --where, --last) on one PNG, the "
        "runs numbered, each legend entry naming the params that differ, and the same as a table "
        "that fits 80 columns. Reads the experiments' committed outputs from the DVC cache; works "
        "offline."), help="the loss curves of DVC experiments on one figure", func=cmd_compare)
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

    p = sub.add_parser(
        "repro-check", help="dvc repro --force, then compare dvc.lock with the committed one",
        description="The reproducibility check to copy into CI. Exit 0 when every output "
                    "hash in dvc.lock is reproduced (or only float outputs moved, within "
                    "the tolerance: BLAS kernels differ between CPU families) and `dvc "
                    "status` is clean; 1 when something moved; 2 for a usage mistake.",
                    func=cmd_repro_check)
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="relative tolerance for numbers in drifted float outputs (default 1e-4)")

    p = sub.add_parser(
        "export", help="write trained weights as a Hugging Face Llama folder or a GGUF file",
        description="Export Spark weights for the Llama ecosystem: --to hf writes a folder "
                    "that transformers loads as LlamaForCausalLM (config, model.safetensors, "
                    "tokenizer); --to gguf writes one file llama.cpp runs.", func=_export)
    p.add_argument("out", metavar="OUT", help="output folder (hf) or .gguf file (gguf)")
    p.add_argument("--to", required=True, choices=tuple(WRITERS), help="the format to write")
    p.add_argument("--weights", required=True, help="Spark weights.safetensors to export")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json the model was trained with (default: the job's "
                        "tokenizer.json beside --weights when the weights record one, "
                        "checked by sha256; else the byte tokenizer, id = byte value)")
    p.add_argument("--force", action="store_true",
                   help="replace OUT when it exists and is not empty")

    p = sub.add_parser(
        "import", help="turn a Hugging Face Llama folder into Spark weights",
        description="Read a Llama-compatible Hugging Face folder (config.json + "
                    "model.safetensors) and write Spark weights, a base for further training.",
                    func=_import)
    p.add_argument("folder", metavar="DIR", help="the Hugging Face model folder")
    p.add_argument("--from", dest="source", required=True, choices=("hf",),
                   help="the format to read")
    p.add_argument("--out", required=True, help="Spark weights file to write")
    p.add_argument("--force", action="store_true", help="replace --out when it exists")

    p = sub.add_parser(
        "sweep", help="run a grid of `dvc exp run -S` points on a Dask cluster and compare them",
        description="Expand -S KEY=V1,V2 ... into a grid (as `dvc exp run --queue -S` does), "
                    "run each point as `dvc exp run` in a Dask worker's own clone of the "
                    "shared git remote at this commit, `dvc exp push` it, then `dvc exp pull` "
                    "the results here and print params, metrics and output hashes. Points "
                    "whose experiment already exists are not run again; a failed point is "
                    "reported and does not stop the others (exit 1 when any failed).",
                    func=cmd_sweep)
    p.add_argument("-S", "--set-param", dest="specs", action="append", default=[],
                   metavar="KEY=V1[,V2...]",
                   help="a params.yaml key and its values, e.g. step.lr=0.02,0.05 "
                        "(repeat for more axes; +KEY=... adds a key)")
    add_cluster_flags(p)
    p.add_argument("-o", "--out", default=None,
                   help="write the comparison here as JSON (default out/sweep.json under "
                        "the project root)")
    p.add_argument("--json", action="store_true",
                   help="print the comparison as JSON instead of a table")



def _bench(args) -> int:
    import dataclasses

    from sparktrain.train.bench import (BENCH_LR, DEFAULT_BATCH, WARMUP_STEPS, format_report,
                                        grind_note, plain_sgd, run_bench, run_scaling,
                                        stderr_progress)
    from sparktrain.train.live import StderrLines
    from sparktrain.train.optim import JobUpdates

    stderr_line = StderrLines()  # each line on stderr as it comes
    job = load_params(args.params) if args.params else None
    scale = args.scale or (job.scale if job else "tiny")
    # the built-in scales and those of --params (default: ./params.yaml when it exists)
    cfg = model_config(scale, (job or load_params_or_defaults()).scales)
    vocab = args.vocab or (job.vocab_size if job and job.tokenizer == "bpe" else None)
    if vocab:
        cfg = dataclasses.replace(cfg, vocab=vocab).validate()
    step = job.step if job else None
    if args.optimizer:
        step = step or StepConfig(lr=BENCH_LR)
        if args.optimizer != "muon" and step.adam_lr is not None:  # muon's knob goes with it
            step = dataclasses.replace(step, adam_lr=None)
        step = override(step, optimizer=args.optimizer)
    make_update = JobUpdates(step, WARMUP_STEPS + args.steps) if step else plain_sgd
    batch_size = args.batch_size or (step.batch_size if job else None)
    shards = args.shards or (step.shards if job else None)
    device = resolve(args.device)
    if device.note and not args.json:
        stderr_line(device.note)
    bench_tokens = (WARMUP_STEPS + args.steps) * (batch_size or DEFAULT_BATCH.get(scale, 16)) \
        * cfg.seq_len * (2 * args.rounds if args.workers else 1)  # --workers: 1 and N, per round
    note = grind_note(device, args.device, cfg, bench_tokens, f"spark bench --scale {scale}")
    if note:
        stderr_line(note)
    device.check_workers(args.workers)
    if args.workers:
        result = run_scaling(scale, args.workers, shards, args.rounds, batch_size, args.steps,
                             cfg=cfg, progress=None if args.json else stderr_line,
                             make_update=make_update)
    else:  # a params file's job runs on as many workers as its training would
        result = run_bench(scale, batch_size, args.steps,
                           progress=None if args.json else stderr_progress, cfg=cfg,
                           shards=shards or 1, workers=step.workers if job else 1,
                           device=device, make_update=make_update)
    print(canonical_json(result) if args.json else format_report(result))
    return 0


def _read_json(path, what: str):
    return load_json(read_input(path, what), f"{what} {path}")


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
    pairs, data_sha256 = read_pairs(args.data)
    params = _on_device(args, params)
    result = evaluate(params, cfg, pairs, batch_size=args.batch_size, max_new=args.max_new,
                      n_samples=args.samples, tokenizer=tok)
    result.update(data=str(args.data), data_sha256=data_sha256, weights=str(args.weights))
    if out is not None:
        write_json(out, result)
    sys.stdout.write(canonical_json(result) if args.json else printable_lines(format_table(result)))
    return 0


def _eval_corpus(args, out, params, cfg, meta) -> int:
    """A corpus or text model on the held-out split of its job folder (corpus/, written by
    the prepare stage or `spark train`): the eval stage's bits per byte, outside DVC."""
    from pathlib import Path

    from sparktrain.core.jobfiles import CORPUS, TOKENIZER
    from sparktrain.data.source import CorpusSource
    from sparktrain.data.tokenizer import read_tokenizer
    from sparktrain.params import EvalConfig

    folder = Path(args.weights).parent
    if not (folder / CORPUS).is_dir():
        raise SparkError(f"no {folder / CORPUS} beside {args.weights}: a corpus model is scored "
                         f"on its job folder's prepared held-out split")
    tok, tok_sha256 = read_tokenizer(args.tokenizer or folder / TOKENIZER,
                                     meta.get("tokenizer_sha256"), args.weights)
    source = CorpusSource(str(meta.get("dataset", "")), (), 0.1)  # evaluate reads corpus/ only
    result = source.evaluate(folder / CORPUS, _on_device(args, params), cfg, tok, tok_sha256,
                             EvalConfig())
    result.update(weights=str(args.weights))
    if out is not None:
        write_json(out, result)
    sys.stdout.write(canonical_json(result) if args.json else printable_lines(
        f"eval {args.weights}: the held-out split ({result['heldout_bytes']:,} bytes, "
        f"{result['heldout_targets']:,} tokens)\n"
        f"  bpb {result['bpb']:.4f}  (sliding, stride {result['sliding_stride']}: "
        f"{result['bpb_sliding']:.4f})\n"
        f"  zlib-9 {result['zlib9_bpb']:.4f}  lzma-9e {result['lzma9e_bpb']:.4f}\n"
        f"  loss {result['loss']:.4f}  perplexity {result['perplexity']:.2f}\n"))
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


def cmd_plot(args) -> int:
    from sparktrain.data.source import SOURCES, PairsSource
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
    kind = next((k for k in SOURCES if k.kind == ckpt.get("dataset_kind")), PairsSource)
    write_loss_png(out, curve, heldout, job=job, scale=scale_label(ckpt.get("arch")),
                   labels=kind.curve_labels)
    print(f"wrote {printable(args.out)}")
    return 0


def cmd_compare(args) -> int:
    from sparktrain.eval.compare import as_json, compare, format_table
    from sparktrain.eval.plot import write_compare_png

    args.out = args.out or os.path.relpath(find_root() / OUT / "compare.png")
    out = check_output(args.out, "png")
    sweep = compare(args.experiments, where=args.where, last=args.last)
    for exp in sweep["experiments"]:
        if exp.old_layout:
            print(f"spark: note: experiment {exp.name} has the eval.json layout from before "
                  f"eval_detail.json; its headline numbers are read from it", file=sys.stderr)
    write_compare_png(out, sweep)
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
        print(f"wrote {printable(args.out)}" + (f": {', '.join(names)}" if names else ""))
    return 0


def _import(args) -> int:
    from sparktrain.export.hf import import_hf

    arch = import_hf(args.folder, args.out, args.force)["arch"]
    print(f"wrote {printable(args.out)}: dim {arch['dim']}, {arch['n_layer']} layers, "
          f"{arch['n_head']} heads, {arch['n_kv_head']} kv heads, seq_len {arch['seq_len']}")
    return 0


def cmd_sweep(args) -> int:
    try:
        from sparktrain.sweep import driver
    except ImportError as err:
        raise SparkError(f"spark sweep needs Dask distributed ({err.name} is missing): "
                         f"pip install 'sparktrain[sweep]'") from None
    from sparktrain.core.progress import Progress
    from sparktrain.sweep.grid import format_table

    check_cluster_flags(args)

    def say(line: str) -> None:
        print(f"sweep: {printable(line)}", file=sys.stderr, flush=True)

    root = find_root()
    out = args.out or os.path.relpath(root / OUT / "sweep.json")
    target = check_output(out, "json")  # before the grid runs, not after
    plan = driver.plan_sweep(root, args.specs, args.git_remote, args.dvc_remote,
                             one_machine=args.scheduler is None, say=say)
    counts = {"done": 0, "failed": 0}
    with Progress("sweep", total=len(plan.points), unit="points") as bar:
        def tick(state: str) -> None:
            counts["failed" if state == "failed" else "done"] += 1
            bar.advance(note=f"{counts['done']} done, {counts['failed']} failed")

        workers = args.workers or (0 if args.scheduler else driver.usable_cores())
        doc = driver.sweep(plan, args.scheduler, workers, args.scratch,
                           progress=lambda line: bar.log(f"sweep: {printable(line)}"),
                           tick=tick)
    write_json(target, doc)  # makes the missing folders, never through a link
    print(canonical_json(doc) if args.json else printable_lines(format_table(doc)),
          end="" if args.json else "\n")
    return 1 if any(p["state"] != "done" for p in doc["points"]) else 0
