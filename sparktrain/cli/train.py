"""A program and its jobs: `spark compile` and `spark dump` (the program's bytes),
`spark train`, `spark run` (alias `spark --run-bc`) and `spark status`, and what they tell
a person beyond their JSON (see docs/outputs.md, "failed.json")."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from sparktrain.core.errors import SparkError, printable, printable_lines
from sparktrain.core.fsutil import atomic_write_bytes, canonical_json, read_input, sha256_bytes
from sparktrain.core.gate import check_output
from sparktrain.core.jobfiles import check_job_id, job_dir, root_of

ARCH = (("--dim", "dim"), ("--n-layer", "n_layer"), ("--n-head", "n_head"),
        ("--n-kv-head", "n_kv_head"), ("--seq-len", "seq_len"))
# What --params defaults to, per command (resolve_configs' default_params).
PARAMS_DEFAULT = {"train": "none: every knob's default, then the flags",
                  "run": "./params.yaml when it exists",
                  "apply-step": "none; apply-step reads no params file, its knobs are the flags"}


def add_train_flags(p: argparse.ArgumentParser, command: str) -> None:
    from sparktrain.cli import name_arg
    from sparktrain.model.config import scale_names
    from sparktrain.cli.stepflags import add_step_flags

    add_step_flags(p)
    a = p.add_argument_group("architecture")
    a.add_argument("--scale", default=None, type=name_arg,
                   help=f"a built-in scale ({scale_names()}) or a row of params.yaml's "
                        "scales (default: params.yaml's scale, else tiny)")
    for flag, dest in ARCH:
        a.add_argument(flag, dest=dest, type=int, default=None, help=f"override the scale's {dest}")
    p.add_argument("--params", default=None,
                   help=f"params.yaml to read knobs from (default: {PARAMS_DEFAULT[command]})")
    p.add_argument("--heldout", default=None,
                   help="held-out JSONL whose loss is logged after every outer pass "
                        "(default: params.yaml's eval.data when a params file is read); "
                        "for `spark train` on a folder or text rows, the fraction of its "
                        "files held out instead (corpus.heldout, e.g. 0.2)")


def register(sub) -> None:
    p = sub.add_parser("compile", help="compile a .spark source to SPARK_BC bytes", description=(
        "Compile a .spark source to a .sparkbc program (byte-exact; see docs/sparkbc.md)."),
        func=cmd_compile)
    p.add_argument("source", metavar="SRC", help=".spark source file")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output .sparkbc file (default: SRC with the .sparkbc suffix)")

    p = sub.add_parser("dump", help="disassemble a .sparkbc program", description="List a "
                       ".sparkbc program: header, sections, string and const pools, xrefs, code, "
                       "train jobs.", func=cmd_dump)
    p.add_argument("file", metavar="FILE", help=".sparkbc file")
    p.add_argument("--json", action="store_true", help="print the same facts as canonical JSON")


    p = sub.add_parser("train", help="train a job with numpy SGD (the STEP of a program)",
        description="Train a job: either the TRAIN of a program (--program P.sparkbc --job ID) "
        "or a dataset directly (--dataset D --out DIR [--base W.safetensors]). The initial "
        "weights are drawn from --seed salted with the program's sha256 (docs/model.md, "
        "\"Init\"): --dataset alone has no program, so it starts from other weights than the "
        "pipeline (or --program) with the same knobs, and ends with other losses and bytes; "
        "--program P --job ID gives the pipeline's.", func=cmd_train)
    p.add_argument("--program", help="compiled .sparkbc program")
    p.add_argument("--job", help="job id of a TRAIN in the program")
    p.add_argument("--dataset", help="JSONL dataset (pairs or {\"text\": ...} rows), a "
                   "folder of text files, or @stdlib (without --program)")
    p.add_argument("--glob", action="append", default=None, metavar="PATTERN",
                   help="a folder dataset's files, relative to it; repeat for more (default: "
                        "the params' corpus.glob, **/*.py)")
    p.add_argument("--out", help="output folder (without --program)")
    p.add_argument("--base", help="base .safetensors to continue from (without --program)")
    add_train_flags(p, "train")

    p = sub.add_parser("run", help="execute a .sparkbc program (TRAIN, STEP, TRAIN_STATUS, ...)",
        description="Execute a SPARK_BC program directly: MODEL, LET, PRINT, HALT, TRAIN (dry "
        "accept), STEP (SGD) and TRAIN_STATUS. One JSON line per train op on stdout. Knobs come "
        "from params.yaml when present; flags override.", func=cmd_run)
    p.add_argument("program", help="compiled .sparkbc program")
    add_train_flags(p, "run")

    p = sub.add_parser("status", help="print a job's real state as JSON",
        description="Print the state of out/train/JOB (declared, trained, failed) with its "
        "losses, eval metrics and timings.", func=cmd_status)
    p.add_argument("job", nargs="?", default=None,
                   help="job id, or a job folder (default: params.yaml's job)")
    p.add_argument("--summary", action="store_true",
                   help="a few human lines (losses, eval metrics, files) instead of JSON")


def read_source(path: str | os.PathLike) -> str:
    """A .spark file's text; unreadable or non-UTF-8 input is a one-line error."""
    from sparktrain.core.errors import SourceError

    raw = read_input(path, "program")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        before = raw[:err.start]  # the column: bytes since the last newline, from 1
        raise SourceError(f"not UTF-8 text (byte offset {err.start})", os.fspath(path),
                          before.count(b"\n") + 1, len(before) - before.rfind(b"\n")) from None


def cmd_compile(args: argparse.Namespace) -> int:
    from sparktrain.bc.compiler import compile_source

    out = Path(args.output) if args.output else Path(args.source).with_suffix(".sparkbc")
    target = check_output(out, "sparkbc", (args.source,))
    data = compile_source(read_source(args.source), args.source)   # raises before any write
    atomic_write_bytes(target, data)  # an OSError is its one line (fsutil.write_error)
    print(f"wrote {printable(os.fspath(out))} ({len(data)} bytes, sha256 {sha256_bytes(data)})")
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    from sparktrain.bc.codec import dump_json, dump_text, read_program

    program, _data = read_program(args.file)
    sys.stdout.write(canonical_json(dump_json(program)) if args.json
                     else printable_lines(dump_text(program)))
    return 0


def resolve_configs(args, params_path: str | None, default_params: bool, fallback=None):
    """(params or defaults, StepConfig, ModelConfig, held-out file or None) from
    defaults (or `fallback`, when no params file is read) < params.yaml < flags."""
    from sparktrain.model.device import resolve as resolve_device
    from sparktrain.cli.stepflags import step_from_flags
    from sparktrain.params import load_params_or_defaults, model_config

    knobs = (fallback if params_path is None and fallback is not None
             else load_params_or_defaults(params_path, default_file=default_params))
    step = step_from_flags(knobs.step, args)
    resolve_device(step.device)  # a GPU that cannot be had: one line before anything is written
    cfg = model_config(args.scale or knobs.scale, knobs.scales, train_attn=step.train_attn,
                       options=dataclasses.asdict(knobs.arch),
                       **{d: getattr(args, d) for _, d in ARCH})
    return knobs, step, cfg, args.heldout or knobs.heldout()


def cmd_train(args) -> int:
    import dataclasses

    from sparktrain.data.source import streams
    from sparktrain.params import override
    from sparktrain.train.job import adhoc_job, job_from_program

    if args.glob and not args.dataset:
        raise SparkError("--glob picks a folder dataset's files: give it with --dataset FOLDER")
    if args.program:
        if args.dataset or args.out or args.base:
            raise SparkError("--program takes dataset, base and out from the program's TRAIN; "
                             "drop --dataset/--out/--base")
        if not args.job:
            raise SparkError("--program needs --job ID (the TRAIN to run)")
        job = job_from_program(args.program, args.job)
    else:
        if not (args.dataset and args.out):
            raise SparkError("give --program P.sparkbc --job ID, or --dataset D --out DIR")
        job = adhoc_job(args.dataset, args.out, args.base)
    text = not args.program and streams(args.dataset)
    knobs = train_knobs(args.params, text)
    knobs, step, cfg, heldout = resolve_configs(args, None, default_params=False, fallback=knobs)
    if text:  # the dataset's own split: --heldout is the fraction of its files held out
        knobs = dataclasses.replace(knobs, corpus=override(
            knobs.corpus, glob=args.glob and list(args.glob),
            heldout=None if args.heldout is None else heldout_fraction(args.heldout)))
        heldout = None
    elif args.params and not args.heldout:
        heldout = knobs.eval.data   # a params file's held-out pairs, as params.yaml's
    first = knobs_line(args.params, step, cfg, heldout,
                       text=knobs.corpus.heldout if text else None)
    print(json.dumps(train_job(job, knobs, step, cfg, heldout, first), sort_keys=True))
    return 0


def train_knobs(params_path: str | None, text: bool):
    """The knobs of `spark train`. A --params file may hold only the keys it changes: every
    other knob its default. Without one, a folder or text rows take the tiny coder recipe's
    (a BPE, AdamW with a cosine schedule, 6 x 200 steps of 16 windows), which beats zlib on
    text, where the defaults made for the pairs job (byte tokens, SGD, 4 x 8) lose to it;
    the recipe's job, program and corpus stay its own (the files are the --glob's)."""
    from sparktrain.params import CorpusConfig, Defaults, load_params
    from sparktrain.train.recipes import load_recipe

    if params_path is not None:
        return load_params(params_path, Defaults)
    if not text:
        return Defaults()
    recipe = load_recipe("tiny")
    return Defaults(**{name: getattr(recipe, name) for name in Defaults.__dataclass_fields__
                       if name not in ("job", "program", "corpus")}, corpus=CorpusConfig())


def heldout_fraction(text: str) -> float:
    """--heldout for a folder or text rows: a fraction in (0, 1)."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < 1:
        raise SparkError(f"--heldout {printable(text)[:80]}: for a folder or text rows it is "
                         f"the fraction of files held out, in (0, 1), e.g. --heldout 0.2 "
                         f"(a held-out JSONL is for a pairs dataset)")
    return value


def train_job(job, knobs, step, cfg, heldout, first_line: str | None = None, *,
              folder=None, labels: dict | None = None) -> dict:
    """STEP `job` through the one run (train/runner.py) -> the JSON summary every train
    command prints (`spark train`, a STEP of `spark run`, `spark code train`, `spark
    apply-step`). A corpus or text-rows job trains from corpus/, so outside the pipeline
    the run prepares it first, as the tokenizer and prepare stages do. The loop's lines go
    to stderr (a bar on a terminal, train/live.py), `first_line` before them: a bad input,
    refused before training, stays the only line. `folder`, `labels`: run_job's."""
    from sparktrain.data.source import source_for
    from sparktrain.train.live import StderrLines
    from sparktrain.train.runner import Prepare, run_job

    source = source_for(job.dataset, knobs, heldout)
    prepare = Prepare(knobs.tokenizer, knobs.vocab_size) if source.streamed else None
    result = run_job(job, step, cfg, source, folder=folder, prepare=prepare, labels=labels,
                     progress=StderrLines(first_line))
    c = result.checkpoint
    return {"op": "STEP", "job": c["job"], "state": "trained", "trained": True,
            "not_sgd": c["not_sgd"], "step_n": c["step_n"], "loss_before": c["loss_before"],
            "loss_after": c["loss_after"], "weights": c["weights"],
            "weights_sha256": c["weights_sha256"],
            "tokens_per_s": result.perf.get("tokens_per_s"), "mfu": result.perf.get("mfu")}


def cmd_run(args) -> int:
    from sparktrain.bc.codec import execute
    from sparktrain.data.source import source_for
    from sparktrain.train import jobstate
    from sparktrain.train.job import job_from_train, read_program
    from sparktrain.train.plan import dry_accept

    program = read_program(args.program)
    knobs, step, cfg, heldout = resolve_configs(args, args.params, default_params=True)
    declared: dict[str, object] = {}
    bound: dict[str, dict] = {}   # job id -> the dict its TRAIN bound (what `print job` shows)

    def job_of(job_id: str):
        check_job_id(job_id)
        if job_id not in declared:
            raise SparkError(f"job {job_id!r} has no TRAIN before this instruction in "
                             f"{args.program}")
        return declared[job_id]

    def on_train(ins, ops):
        job = job_from_train(args.program, *ops)
        declared[job.id] = job
        plan = dry_accept(job, cfg, step.batch_size, source_for(job.dataset, knobs, heldout))
        line = bound[job.id] = {"op": "TRAIN", "job": job.id, "state": "declared",
                                "trained": False, "not_sgd": True, "dataset": job.dataset,
                                "base": job.base, "out": job.out, "method": job.method,
                                "n_params": plan["n_params"]}
        if "dataset_rows" in plan:  # a pairs job counts rows; a corpus, tokens (prepare)
            line["dataset_rows"] = plan["dataset_rows"]
        return line

    def on_step(ins, ops):
        summary = train_job(job_of(ops[0]), knobs, step, cfg, heldout)
        # the job's binding follows the job: a `print job` after the STEP says it trained
        bound[ops[0]].update({k: summary[k] for k in ("state", "trained", "not_sgd")
                              if k in summary})
        return summary

    def on_status(ins, ops):
        job = job_of(ops[0])
        state = jobstate.job_state(job.out_dir, job.id)
        state.pop("perf", None)  # timings vary run to run; `spark status` shows them
        return {"op": "TRAIN_STATUS", **state}

    execute(program, {"TRAIN": on_train, "STEP": on_step, "TRAIN_STATUS": on_status},
            out=sys.stdout)
    return 0


def cmd_status(args) -> int:
    from sparktrain.params import PARAMS_FILE, load_params, step_record
    from sparktrain.train import jobstate

    root = root_of() or Path.cwd()  # the project (from a subfolder too), else this folder
    params_file = root / PARAMS_FILE
    job = load_params(params_file).job if args.job is None else args.job
    folder = Path(job)
    if not folder.is_dir():
        check_job_id(job)
        folder = Path(os.path.relpath(job_dir(job, root)))
    if not folder.is_dir():
        raise SparkError(f"no job folder {folder} (run the pipeline or `spark run` first)")
    try:  # the step knobs params.yaml holds now, as a failure records them
        now = step_record(load_params(params_file).step) if params_file.is_file() else None
    except SparkError:
        now = None
    state = jobstate.job_state(folder, current_step=now)
    sys.stdout.write(printable_lines(_summary_text(state, folder)) if args.summary  # errors.py
                     else canonical_json(state))
    return 0


def _summary_text(state: dict, folder: Path) -> str:
    from sparktrain.core.compat import PRE_STEP_FAILURE_KNOBS  # those failed.json always held
    from sparktrain.core.values import number

    def num(v, fmt: str) -> str:  # job_state checked the numbers; None is unreadable
        return "unreadable" if number(v) is None else format(v, fmt)

    lines = [f"job {state['job']}: {state['state']}"]
    if state["state"] == "running":
        lines[0] += (f" (a spark process is writing it now; below, the last finished run: "
                     f"{state['last_state']})")
    if "loss_before" in state:
        sha = state.get("weights_sha256")
        lines.append(f"  train loss  {num(state['loss_before'], '.4f')} -> "
                     f"{num(state['loss_after'], '.4f')} "
                     f"(step_n {num(state['step_n'], 'd')}, weights sha256 "
                     f"{sha[:12] if isinstance(sha, str) else 'unreadable'}, "
                     f"verified {str(state['weights_verified']).lower()})")
    ev = state.get("eval")
    if ev:
        parts = [f"{k} {v:.4f}" for k, v in ev.items() if number(v) is not None]
        lines.append("  held-out    " + "  ".join(parts))
    perf = state.get("perf")
    if perf:
        mfu = number(perf.get("mfu"))
        mfu = f", {mfu * 100:.1f}% of matmul peak" if mfu else ""
        lines.append(f"  speed       {perf['tokens_per_s']:,.0f} tokens/s{mfu}, "
                     f"{perf['total_seconds']:.1f}s in the step")
    elif "perf_unreadable" in state:
        lines.append("  speed       unreadable (perf.json)")
    if "failure" in state:  # when, its knobs, why, and whether params.yaml still holds them
        failure = state["failure"]
        when = f" at {failure['when']}" if failure.get("when") else ""
        knobs = ", ".join(f"{k} {failure[k]}" for k in PRE_STEP_FAILURE_KNOBS if k in failure)
        now = "" if state.get("failure_current", True) else \
            "; params.yaml differs now, the verified model above is the job's"
        lines.append(f"  last run failed{when} ({knobs}): {failure.get('reason')}{now}")
    files = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    lines.append(f"  files       {folder.as_posix()}/{{{','.join(files)}}}")
    return "\n".join(lines) + "\n"


def knobs_line(params_path: str | None, step, cfg, heldout: str | None,
               text: float | None = None) -> str:
    """The first line of `spark train`: where its knobs came from and the main ones;
    `text`: the fraction of files held out, for a folder or text rows."""
    source = (f"knobs from {params_path} and flags" if params_path else
              "knobs from the tiny coder recipe for text and flags (no --params)" if text else
              "knobs from the defaults and flags (no --params: params.yaml is not read)")
    held = (f"held-out {heldout}" if heldout else
            f"held-out: the dataset's own split, {text:g} of its files (--heldout)" if text
            else "no held-out file (--heldout)")
    return (f"spark train: {source}: lr {step.lr:g}, outer {step.outer}, inner {step.inner}, "
            f"batch_size {step.batch_size}, optimizer {step.optimizer}, seed {step.seed}, "
            f"dim {cfg.dim}, {cfg.n_layer} layers; {held}")
