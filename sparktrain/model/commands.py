"""`spark bench` (the model area's command)."""
from __future__ import annotations

from sparktrain.argtypes import positive_int
from sparktrain.model.config import scale_names


def register(sub) -> None:
    p = sub.add_parser(
        "bench", help="time training micro-steps and report model FLOP/s utilisation",
        description="Time loss_and_grads + SGD on synthetic full-length batches and report "
                    "tokens/s and model FLOP/s over the float32 matmul peak of this process.")
    p.add_argument("--scale", default="tiny",
                   help=f"a built-in scale ({scale_names()}) or a row of --params' scales "
                        "(default tiny)")
    p.add_argument("--params", default=None,
                   help="params.yaml whose scales table to use (default: ./params.yaml "
                        "when it exists)")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="sequences per step (default: tiny 8, large 16)")
    p.add_argument("--steps", type=positive_int, default=10,
                   help="timed steps after warm-up (default 10)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="data-parallel workers: time 1 worker against N at one shard count, "
                        "in interleaved rounds, and report the scaling")
    p.add_argument("--shards", type=positive_int, default=None,
                   help="fixed gradient shards per step (default: --workers, else 1)")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="interleaved rounds with --workers (default 3)")
    p.add_argument("--device", default="cpu",
                   help="cpu (numpy, default), cuda, mps or auto (a GPU needs the gpu extra: "
                        "pip install -e '.[gpu]'; docs/gpu.md)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=_bench)


def _bench(args) -> int:
    from sparktrain.errors import SparkError
    from sparktrain.fsutil import canonical_json
    from sparktrain.model.bench import (format_report, run_bench, run_scaling,
                                        stderr_line, stderr_progress)
    from sparktrain.model.device import resolve
    from sparktrain.params import scale_config

    cfg = scale_config(args.scale, args.params)
    device = resolve(args.device)
    if device.note and not args.json:
        stderr_line(device.note)
    if args.workers and device.kind != "cpu":
        raise SparkError(f"--workers times CPU worker processes; {device.name} runs one "
                         "process (drop --workers or use --device cpu)")
    if args.workers:
        result = run_scaling(args.scale, args.workers, args.shards, args.rounds,
                             args.batch_size, args.steps, cfg=cfg,
                             progress=None if args.json else stderr_line)
    else:
        result = run_bench(args.scale, args.batch_size, args.steps,
                           progress=None if args.json else stderr_progress, cfg=cfg,
                           shards=args.shards or 1, workers=1, device=device)
    print(canonical_json(result) if args.json else format_report(result))
    return 0
