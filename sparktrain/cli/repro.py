"""`spark repro-check`: force-repro and compare dvc.lock with the committed one."""
from __future__ import annotations

from sparktrain.core.errors import SparkError


def register(sub) -> None:
    p = sub.add_parser(
        "repro-check", help="dvc repro --force, then compare dvc.lock with the committed one",
        description="The reproducibility check to copy into CI. Exit 0 when every output "
                    "hash in dvc.lock is reproduced (or only float outputs moved, within "
                    "the tolerance: BLAS kernels differ between CPU families) and `dvc "
                    "status` is clean; 1 when something moved; 2 for a usage mistake.")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="relative tolerance for numbers in drifted float outputs (default 1e-4)")
    p.set_defaults(func=cmd_repro_check)


def cmd_repro_check(args) -> int:
    from sparktrain.repro.check import check

    if not args.tolerance >= 0:
        raise SparkError(f"--tolerance must be >= 0, got {args.tolerance}")
    return check(args.tolerance)
