"""`spark sweep`: a grid of `dvc exp run -S` points on a Dask cluster, then their
comparison (sparktrain/sweep/, docs/pipeline.md)."""
from __future__ import annotations

import os
import sys

from sparktrain.cli import add_cluster_flags, check_cluster_flags
from sparktrain.core.errors import SparkError, printable, printable_lines
from sparktrain.core.fsutil import canonical_json, write_json
from sparktrain.core.gate import check_output
from sparktrain.core.jobfiles import OUT, find_root


def register(sub) -> None:
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


def cmd_sweep(args) -> int:
    try:
        from sparktrain.sweep import driver
    except ImportError as err:
        raise SparkError(f"spark sweep needs Dask distributed ({err.name} is missing): "
                         f"pip install 'sparktrain[sweep]'") from None
    from sparktrain.core.progress import Progress
    from sparktrain.sweep.grid import sweep_table

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
    print(canonical_json(doc) if args.json else printable_lines(sweep_table(doc)),
          end="" if args.json else "\n")
    return 1 if any(p["state"] != "done" for p in doc["points"]) else 0
