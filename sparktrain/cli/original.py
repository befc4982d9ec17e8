"""The original project's command lines, working here as written (docs/compat.md):
`spark apply-step` (the original `apply_step.py`) and `spark code train` (`spark-code`),
thin fronts over the calls `spark train` makes, so the same inputs give the same bytes.
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from sparktrain.core.errors import SparkError, TrainingFailed
from sparktrain.core.jobfiles import CHECKPOINT, WEIGHTS
from sparktrain.cli.train import ARCH, add_train_flags


def register(sub) -> None:
    # here, not at the top: they load numpy, and `spark-code` imports this module
    # before runtime.start() chooses the BLAS kernel
    from sparktrain.cli import name_arg
    from sparktrain.model.config import scale_names
    from sparktrain.model.devices import DEVICES

    p = sub.add_parser(
        "apply-step", help="one STEP on a weights file, created or updated in place "
                           "(the original apply_step.py)", description=(
        "Train --weights (created, or used as the base and replaced when it exists) on --dataset, "
        "salted by --sparkbc. Prints one JSON line; exit 0 only when the run really trained (loss "
        "fell, trained=true, not_sgd=false), else 2."), func=cmd_apply_step)
    p.add_argument("--sparkbc", required=True,
                   help="the program whose sha256 salts init and is recorded")
    p.add_argument("--weights", required=True,
                   help="DIR/weights.safetensors to create, or to update in place")
    p.add_argument("--checkpoint", default=None,
                   help="DIR/checkpoint.json beside the weights (the default)")
    p.add_argument("--dataset", required=True, help="JSONL dataset (pairs or chat rows)")
    p.add_argument("--source", default=None, help="a label recorded in the metadata")
    p.add_argument("--command", dest="command_label", default=None,
                   help="a label recorded in the metadata (e.g. the command line)")
    add_train_flags(p, "apply-step")

    code = sub.add_parser("code", help="Spark-coder: `spark code train --scale S`",
                          description="The Spark-coder commands; `spark-code COMMAND` is the same as `spark code COMMAND`.")
    code_sub = code.add_subparsers(dest="code_command", metavar="COMMAND",
                                   parser_class=sub._parser_class)
    t = code_sub.add_parser("train", help="train the Spark-coder job at a scale", description=(
        "Train a Spark-coder recipe (data/programs/coder-recipes.yaml: tokenizer, vocabulary, "
        "optimizer, schedule, batch and passes made for code), then print the held-out bits per "
        "byte beside zlib-9 and lzma-9e and completions of fixed prompts."), func=cmd_code_train)
    which = t.add_mutually_exclusive_group()
    which.add_argument("--scale", default=None, type=name_arg,
                       help=f"the recipe of a scale ({scale_names()}; default tiny)")
    which.add_argument("--params", default=None, metavar="FILE",
                       help="train this params file instead (the schema of params.yaml)")
    t.add_argument("--device", default="auto", choices=DEVICES,
                   help="auto (default): the GPU PyTorch sees (the gpu extra), else the CPU, "
                        "saying which; cpu: numpy, the reference bytes; cuda or mps (docs/gpu.md)")
    t.add_argument("--shards", type=int, default=None,
                   help="fixed gradient shards per micro-step, computed by one worker "
                        "process per core; the bytes depend on it, not on the cores "
                        "(default: the recipe's step.shards)")
    t.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="save a resumable state every N passes; after an interruption the "
                        "same command continues the run (the same final bytes) (default: the "
                        "recipe's step.checkpoint_every)")
    t.add_argument("--dvc-command", action="store_true",
                   help="print the `dvc exp run` command that trains this recipe through the "
                        "pipeline (every knob as -S ++key=value: the same weights bytes, and "
                        "it runs again as written) and exit")
    code.set_defaults(func=lambda args: code.print_help() or 2)  # no subcommand: a usage mistake


def _job_folder(args) -> Path:
    weights = Path(args.weights)
    if weights.name != WEIGHTS:
        raise SparkError(f"--weights must be a job folder's {WEIGHTS} (got {weights.name!r}): "
                         f"a job's files have fixed names, so crash recovery and `spark "
                         f"status` find them")
    checkpoint = Path(args.checkpoint) if args.checkpoint else weights.parent / CHECKPOINT
    beside = checkpoint.parent.resolve() == weights.parent.resolve()
    if not beside and not checkpoint.parent.is_dir():
        raise SparkError(f"--checkpoint {checkpoint}: folder {checkpoint.parent} does not exist")
    if checkpoint.name != CHECKPOINT or not beside:
        raise SparkError(f"--checkpoint must be {weights.parent / CHECKPOINT}: the weights, "
                         f"checkpoint and ARTIFACT of a job are committed together, in one "
                         f"folder")
    return weights.parent


def _arch_from_base(args, weights: Path) -> None:
    """An existing weights file fixes the architecture: flags may repeat it, not change it."""
    from sparktrain.model.weights import config_from_meta, load_weights

    _, meta = load_weights(weights)
    arch = config_from_meta(meta, weights)
    for flag, dest in ARCH:
        asked = getattr(args, dest)
        if asked is not None and asked != getattr(arch, dest):
            raise SparkError(f"{flag} {asked} but {weights} has {dest} {getattr(arch, dest)}")
        setattr(args, dest, getattr(arch, dest))
    if args.train_attn is None and not arch.train_attn:
        args.train_attn = False


def cmd_apply_step(args) -> int:
    from dataclasses import replace

    from sparktrain.cli.train import resolve_configs, train_job
    from sparktrain.core.fsutil import sha256_file
    from sparktrain.train.folder import JobFolder
    from sparktrain.train.job import adhoc_job, read_program

    path = _job_folder(args)
    weights = path / WEIGHTS
    read_program(args.sparkbc)  # a valid SPARK_BC file, or one line
    folder = JobFolder(path)
    try:
        if weights.exists():  # held from reading the base to the commit: no lost update
            folder.lock()
            _arch_from_base(args, weights)
        job = replace(adhoc_job(args.dataset, path.as_posix(),
                                weights.as_posix() if weights.exists() else None),
                      program=args.sparkbc, sparkbc_sha256=sha256_file(args.sparkbc))
        knobs, step, cfg, heldout = resolve_configs(args, None, default_params=False)
        labels = {k: v for k, v in (("source", args.source), ("command", args.command_label))
                  if v is not None}
        summary = train_job(job, knobs, step, cfg, heldout, folder=folder, labels=labels)
    except TrainingFailed as err:
        print(json.dumps({"op": "STEP", "job": path.name, "trained": False, "not_sgd": True,
                          "error": str(err)}, sort_keys=True))
        raise SparkError(f"training failed: {err}") from None
    finally:
        folder.unlock()
    print(json.dumps(summary, sort_keys=True))
    trained = summary.get("trained") is True and summary["loss_after"] < summary["loss_before"]
    return 0 if trained else 2


def cmd_code_train(args) -> int:
    from sparktrain.cli.train import train_job
    from sparktrain.data.source import source_for
    from sparktrain.eval.generate import learned, learned_text
    from sparktrain.model.device import resolve as resolve_device
    from sparktrain.core.fsutil import read_input
    from sparktrain.core.safeload import load_yaml
    from sparktrain.params import load_params, override
    from sparktrain.train.recipes import dvc_set_flags, load_recipe, recipe_row
    from sparktrain.train.bench import grind_note
    from sparktrain.train.job import job_from_program
    from sparktrain.train.runner import preflight

    knobs = load_params(args.params) if args.params else load_recipe(args.scale or "tiny")
    if args.dvc_command:
        raw = (load_yaml(read_input(args.params, "params file"), args.params) if args.params
               else recipe_row(args.scale or "tiny"))
        print(shlex.join(["dvc", "exp", "run", *dvc_set_flags(raw)]))
        return 0
    step = override(knobs.step, shards=args.shards, device=args.device,
                    checkpoint_every=args.checkpoint_every)
    device = resolve_device(step.device)  # a GPU that cannot be had: one line before prepare
    cfg = knobs.model_config()
    job = job_from_program(knobs.program, knobs.job)
    source = source_for(job.dataset, knobs)
    # a knob the run would refuse (SPARK_WORKERS among them) is said before any advice
    preflight(step, cfg, source, knobs.vocab_size if knobs.tokenizer != "byte" else None)
    note = grind_note(device, step.device, cfg,
                      step.outer * step.inner * step.batch_size * cfg.seq_len,
                      f"spark code train --scale {knobs.scale}")
    if note:
        print(note, file=sys.stderr)
    # the one run: checks, the lock, the recipe's tokenizer and corpus (staged until the
    # commit of the weights), the loop, the commit (train/runner.py)
    summary = train_job(job, knobs, step, cfg, knobs.heldout())
    print(json.dumps(summary, sort_keys=True))
    if not source.prompted:  # a model that continues text: its bpb and completions
        label = f"{knobs.scale}, {knobs.tokenizer}"
        print("\n" + learned_text(learned(job.out_dir, source, knobs.eval), label), end="")
    return 0


def code_main(argv: list[str] | None = None) -> int:
    """The `spark-code` console script: `spark-code train ...` = `spark code train ...`."""
    from sparktrain.cli import main

    return main(["code", *(sys.argv[1:] if argv is None else argv)], spark_code=True)
