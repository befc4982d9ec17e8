"""What runs recorded: `spark plot` (one checkpoint's loss curve), `spark compare` (DVC
experiments side by side, sparktrain/eval/compare.py), `spark repro-check` (dvc.lock
reproduced, sparktrain/repro/check.py) and `spark ci-report` (a pull request's report,
sparktrain/repro/cireport.py)."""
from __future__ import annotations

import os
import sys

from sparktrain.core.errors import SparkError, printable, printable_lines
from sparktrain.core.fsutil import canonical_json
from sparktrain.core.gate import check_output
from sparktrain.core.jobfiles import OUT, find_root
from sparktrain.core.safeload import load_json_file


def register(sub) -> None:
    add_plot(sub)
    add_compare(sub)
    add_repro_check(sub)
    add_ci_report(sub)


def add_plot(sub) -> None:
    p = sub.add_parser("plot", help="draw a checkpoint's loss curve as a PNG", description=(
        "Training loss per outer pass (blue) and, with --eval, the held-out loss (red), titled "
        "with the checkpoint's job and scale."), func=cmd_plot)
    p.add_argument("--checkpoint", required=True, help="out/train/JOB/checkpoint.json")
    p.add_argument("--eval", default=None,
                   help="eval JSON whose loss is drawn at the last outer pass")
    p.add_argument("-o", "--out", required=True, help="PNG file to write")


def add_compare(sub) -> None:
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
    p.add_argument("--all", action="store_true", dest="every_param",
                   help="name every param that differs; by default, with runs of several "
                        "jobs, `job` and the params that differ between runs of one job")
    p.add_argument("--json", action="store_true", help="print canonical JSON instead of a table")
    p.add_argument("-o", "--out", default=None,
                   help="PNG file to write (default out/compare.png under the project root, "
                        "from any subfolder)")


def add_repro_check(sub) -> None:
    p = sub.add_parser(
        "repro-check", help="dvc repro --force, then compare dvc.lock with the committed one",
        description="The reproducibility check to copy into CI. Exit 0 when every output "
                    "hash in dvc.lock is reproduced (or only float outputs moved, within "
                    "the tolerance: BLAS kernels differ between CPU families) and `dvc "
                    "status` is clean; 1 when something moved; 2 for a usage mistake.",
                    func=cmd_repro_check)
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="relative tolerance for numbers in drifted float outputs (default 1e-4)")


def add_ci_report(sub) -> None:
    p = sub.add_parser(
        "ci-report", help="this branch's run against a base branch's, as one Markdown report",
        description="The report a pull request gets (docs/ci.md): the `spark repro-check` "
                    "verdict, the metrics and the params that differ from the base branch as "
                    "tables, and the curves that changed as Mermaid charts, which GitHub and "
                    "GitLab draw. The base's outputs are read from the DVC cache at its "
                    "commit: pull or reproduce them first.", func=cmd_ci_report)
    p.add_argument("--base", required=True, metavar="REV",
                   help="the base branch, e.g. origin/main")
    p.add_argument("--repro-check", default=None, metavar="FILE",
                   help="`spark repro-check`'s saved output: its verdict heads the report")
    p.add_argument("--out", required=True, help="the Markdown file to write, e.g. report.md")
    p.add_argument("--png", default=None,
                   help="also draw both runs' curves as a PNG (an artifact of the CI job)")


def cmd_plot(args) -> int:
    from sparktrain.data.source import SOURCES, PairsSource
    from sparktrain.eval.plot import heldout_points, scale_label, write_loss_png
    from sparktrain.core.values import number

    out = check_output(args.out, "png", (args.checkpoint, args.eval))
    ckpt = load_json_file(args.checkpoint, "checkpoint", f"checkpoint {args.checkpoint}")
    curve = ckpt.get("loss_curve") if isinstance(ckpt, dict) else None
    if not isinstance(curve, list) or not curve:
        raise SparkError(f"checkpoint {args.checkpoint} has no 'loss_curve' list")
    for i, point in enumerate(curve):
        if number(point.get("loss") if isinstance(point, dict) else None) is None:
            raise SparkError(f"checkpoint {args.checkpoint}: loss_curve[{i}] has no finite "
                             "'loss' number")
    heldout = heldout_points(load_json_file(args.eval, "eval file", f"eval file {args.eval}"),
                             curve, args.eval) if args.eval else None
    job = ckpt.get("job") if isinstance(ckpt.get("job"), str) else None
    kind = next((k for k in SOURCES if k.kind == ckpt.get("dataset_kind")), PairsSource)
    write_loss_png(out, curve, heldout, job=job, scale=scale_label(ckpt.get("arch")),
                   labels=kind.curve_labels)
    print(f"wrote {printable(args.out)}")
    return 0


def cmd_compare(args) -> int:
    from sparktrain.eval.compare import as_json, compare, compare_table
    from sparktrain.eval.plot import write_compare_png

    args.out = args.out or os.path.relpath(find_root() / OUT / "compare.png")
    out = check_output(args.out, "png")
    sweep = compare(args.experiments, where=args.where, last=args.last,
                    every_param=args.every_param)
    for exp in sweep["experiments"]:
        if exp.old_layout:
            print(f"spark: note: experiment {exp.name} has the eval.json layout from before "
                  f"eval_detail.json; its headline numbers are read from it", file=sys.stderr)
    write_compare_png(out, sweep)
    if args.json:
        sys.stdout.write(canonical_json(as_json(sweep)))
    else:
        sys.stdout.write(printable_lines(compare_table(sweep)))
        print(f"\nwrote {args.out}")
    return 0


def cmd_repro_check(args) -> int:
    from sparktrain.repro.check import check

    if not args.tolerance >= 0:
        raise SparkError(f"--tolerance must be >= 0, got {args.tolerance}")
    return check(args.tolerance)


def cmd_ci_report(args) -> int:
    from sparktrain.repro.cireport import write_report

    write_report(args.base, args.out, args.repro_check, args.png)
    print(f"wrote {printable(args.out)}" + (f" and {printable(args.png)}" if args.png else ""))
    return 0
