"""`spark bench`: the training speed of a scale or a params file's job, in tokens/s and
model FLOP/s over this process's float32 matmul peak (sparktrain/train/bench.py)."""
from __future__ import annotations

from sparktrain.cli import positive_int
from sparktrain.core.fsutil import canonical_json
from sparktrain.model.device import DEVICES, resolve
from sparktrain.knobs import read_only_by_others
from sparktrain.model.config import SCALES
from sparktrain.params import (OPTIMIZERS, StepConfig, load_params, load_params_or_defaults,
                               model_config, override)


def register(sub) -> None:
    p = sub.add_parser("bench", help="time training micro-steps and report model FLOP/s "
                       "utilisation", description=(
        "Time loss_and_grads + the update on synthetic full-length batches and report tokens/s "
        "and model FLOP/s over the float32 matmul peak of this process. With --params FILE, the "
        "job of that params file: its scale, vocabulary, batch, optimizer, clip, schedule and "
        "shards (flags override)."), func=cmd_bench)
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


def cmd_bench(args) -> int:
    import dataclasses

    from sparktrain.train.bench import (BENCH_LR, DEFAULT_BATCH, WARMUP_STEPS, format_report,
                                        grind_note, plain_sgd, run_bench, run_scaling,
                                        stderr_progress)
    from sparktrain.train.live import StderrLines
    from sparktrain.train.optim import JobUpdates

    stderr_line = StderrLines()  # each line on stderr as it comes
    job = load_params(args.params) if args.params else None
    scale = args.scale or (job.scale if job else "tiny")
    # the built-in scales and those of --params (default: ./params.yaml when it exists),
    # with --params' arch options: the model its job trains
    cfg = model_config(scale, (job or load_params_or_defaults()).scales,
                       options=dataclasses.asdict(job.arch) if job else None)
    vocab = args.vocab or (job.vocab_size if job and job.tokenizer == "bpe" else None)
    if vocab:
        cfg = dataclasses.replace(cfg, vocab=vocab).validate()
    step = job.step if job else None
    if args.optimizer:
        step = step or StepConfig(lr=BENCH_LR)
        # the knobs of the optimizer left behind go back to their defaults
        step = dataclasses.replace(step, **read_only_by_others(StepConfig, args.optimizer))
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
