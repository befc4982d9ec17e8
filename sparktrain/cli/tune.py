"""`spark tune`: an Optuna search whose trials are DVC experiments run on a Dask cluster
(sparktrain/sweep/tune.py, its study in study.py; docs/tuning.md "Tuning")."""
from __future__ import annotations

import argparse
import os
import sys
import time

from sparktrain.cli import add_cluster_flags, check_cluster_flags, name_arg, positive_int
from sparktrain.core.errors import SparkError, printable, printable_lines
from sparktrain.core.gate import check_output
from sparktrain.core.jobfiles import OUT, find_root


def register(sub) -> None:
    p = sub.add_parser(
        "tune", help="search params with Optuna, each trial a `dvc exp run` on a Dask cluster",
        description="Each trial is `dvc exp run -n tune-STUDY-N -S ...` in a Dask worker's "
                    "clone of the shared git remote at this commit (as `spark sweep` runs a "
                    "point), pushed and pulled back: an ordinary DVC experiment. Optuna's TPE "
                    "sampler picks each trial's params from what the finished ones scored; "
                    "the held-out figure the step writes after every pass feeds a median "
                    "pruner that stops hopeless trials. The study lives in a database "
                    "(default: SQLite out/tune.db at the project root): run the same command "
                    "again to resume it; a second driver on the same storage shares the work.",
        func=cmd_tune)
    p.add_argument("-S", "--set-param", dest="specs", action="append", default=[],
                   metavar="KEY=RANGE|V1,V2,...",
                   help="a params.yaml key and where to search it: log:A..B (a float on a "
                        "log scale), int:A..B (an integer), A..B (a float) or V1,V2,... (one "
                        "of these values); repeat for more keys, +KEY=... adds a key")
    p.add_argument("--trials", type=positive_int, default=16,
                   help="finished trials (complete or pruned) the study should hold "
                        "(default 16; those already there count)")
    p.add_argument("--study", type=name_arg, default="default",
                   help="the study's name, in the storage and in the experiments' names "
                        "tune-STUDY-N (default: default)")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="the study's database as an SQLAlchemy URL, e.g. "
                        "postgresql://HOST/DB, which a cluster's workers must reach "
                        "(default: sqlite:///out/tune.db under the project root)")
    p.add_argument("--objective", type=name_arg, default="auto",
                   help="the eval.json number to minimise: loss, bpb, bpb_sliding or "
                        "perplexity (default auto: bpb for a corpus job, loss for a pairs "
                        "job); pruning reads the per-pass held-out curve of bpb or loss, "
                        "other objectives are not pruned")
    p.add_argument("--no-prune", dest="prune", action="store_false",
                   help="run every trial to the end")
    p.add_argument("--no-keep-pruned", dest="keep_pruned", action="store_false",
                   help="leave no experiment for a pruned trial (by default its worker runs "
                        "it again with -S ++step.stop_after_pass=K, K the passes it reached, "
                        "and pushes that: K passes and the eval stage more)")
    p.add_argument("--seed", type=seed_arg, default=0,
                   help="the sampler's seed, 0 to 2**32-1 (default 0; a resumed study's "
                        "sampler takes it plus the trials so far, modulo 2**32)")
    p.add_argument("--top", type=positive_int, default=5,
                   help="how many of the best trials the table shows (default 5)")
    add_cluster_flags(p)
    p.add_argument("-o", "--out", default=None,
                   help="the picture (default out/tune-STUDY.png under the project root)")


def seed_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 2 ** 32:
        raise argparse.ArgumentTypeError(f"a seed is 0 to 2**32-1 (4294967295), got {value}")
    return value


def cmd_tune(args) -> int:
    try:
        from sparktrain.sweep import driver, study as studies
    except ImportError as err:
        raise SparkError(f"spark tune needs Dask distributed and Optuna ({err.name} is "
                         f"missing): pip install 'sparktrain[sweep]'") from None
    from sparktrain.sweep.space import parse_space

    check_cluster_flags(args)
    study_name = studies.check_study_name(args.study)
    studies.check_objective(args.objective)
    root = find_root()
    picture = check_output(args.out or os.path.relpath(root / OUT / f"tune-{study_name}.png"),
                           "png")
    url = studies.check_storage(args.storage or studies.default_storage(root),
                                local=args.scheduler is None)
    commit, params = driver.baseline(root, "spark tune")
    dims = parse_space(args.specs, params)
    with studies.storage_errors(url):
        return _tune(args, root, commit, params, dims, url, picture)


def _tune(args, root, commit, params, dims, url, picture) -> int:
    """The study opened (or made), its missing trials run, the table and the picture."""
    from sparktrain.sweep import driver, study as studies, tune
    from sparktrain.sweep.tuneplot import write_tune_png

    study_name = args.study
    with studies.creating(url):
        study = studies.open_study(studies.open_storage(url), study_name, dims,
                                   args.objective, args.trials, args.seed, args.prune)

    def say(line: str) -> None:
        print(f"tune: {printable(line)}", file=sys.stderr, flush=True)

    plan = driver.plan_remotes(root, commit, args.git_remote, args.dvc_remote,
                               one_machine=args.scheduler is None, say=say)
    t0 = time.perf_counter()
    counts = {"done": 0, "pruned": 0, "failed": 0}
    have, whole = len(study.get_trials(deepcopy=False, states=studies.FINISHED)), True
    if have < args.trials:
        whole = _run(args, driver, tune, plan, params, study, url, dims, have, counts, say)
    else:
        say(f"study {study_name!r} in {url} already holds {have} finished trials")
    # every complete trial's experiment, a killed driver's too
    _, local = driver.existing_experiments(plan)
    driver.pull(plan, [name for name in studies.experiments(study) if name not in local])
    table, best = studies.report(study, dims, args.top)
    points = studies.trial_points(study)
    metric = studies.metric_name(study)
    if points:
        write_tune_png(picture, f"study {study_name}: {len(points)} finished trials", metric,
                       [(d.key, d.kind) for d in dims], points)
    print(printable_lines(table))
    print(f"this run: {sum(counts.values())} trials in {time.perf_counter() - t0:.0f} s wall"
          + (f"; wrote {os.path.relpath(picture)}" if points else ""))
    if best:
        print(f"best: dvc exp apply {best}")
    return 0 if best and whole else 1


def _run(args, driver, tune, plan, params, study, url, dims, have, counts, say) -> bool:
    """The study's missing trials on the cluster; False when failures stopped it short."""
    from sparktrain.core.progress import Progress

    workers = args.workers or (0 if args.scheduler else driver.usable_cores())
    with driver.cluster_client(args.scheduler, workers, args.scratch) as client:
        slots = max(1, len(client.scheduler_info()["workers"]))
        say(f"study {study.study_name!r} in {url}: {have} of {args.trials} trials finished, "
            f"running the rest {slots} at a time on Dask worker(s) "
            f"({args.scheduler or 'LocalCluster on 127.0.0.1'})")
        with Progress("tune", total=args.trials - have, unit="trials") as bar:
            def tick(state: str) -> None:
                counts[state] += 1   # a failed trial is not one of the finished ones
                bar.advance(0 if state == "failed" else 1,
                            note=", ".join(f"{n} {k}" for k, n in counts.items()))

            return tune.run_study(plan, params, study, url, dims, args.trials, args.objective,
                                  args.prune, client, slots, args.scratch,
                                  progress=lambda line: bar.log(f"tune: {printable(line)}"),
                                  tick=tick, keep_pruned=args.keep_pruned)
