"""`spark sweep`'s driver: plan the grid at HEAD and where the workers clone from and push
to, run each point as a Dask task (the worker's side: sweep/point.py), `dvc exp pull` them
back, compare. See docs/pipeline.md and README "Sweeping on a cluster". `spark tune`
(sweep/tune.py) runs its trials through the same point runner, with a monitor (monitor.py)."""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import dask
from distributed import Client, LocalCluster, wait

from sparktrain.core.errors import SparkError
from sparktrain.core.safeload import load_yaml
from sparktrain.core.fsutil import read_input
from sparktrain.core.jobfiles import OUT, PARAMS_FILE
from sparktrain.runtime import usable_cores  # noqa: F401  (commands: the default --workers)
from sparktrain.eval.experiments import DvcExperiments
from sparktrain.repro.toolenv import tool_env
from sparktrain.sweep import quiet_workers
from sparktrain.sweep.clones import owned_folder, remove_dead, scratch_folder
from sparktrain.sweep.filelock import held
from sparktrain.sweep.point import Monitor, PointJob, run_point
from sparktrain.sweep.grid import Axis, Point, expand, experiments_of, parse_axis, point_record


@dataclass(frozen=True)
class SweepPlan:
    repo: Path
    commit: str                 # HEAD: the baseline every point runs at
    git_remote: str             # as the driver names it (`origin`)
    git_url: str                # as the workers reach it
    dvc_remote: str | None      # None: the committed default remote
    axes: tuple[Axis, ...]
    points: tuple[Point, ...] = field(default=())
    dvc_remote_url: str | None = None   # a one-machine sweep's local DVC store


def _tool(repo: Path, *cmd: str, what: str | None = None) -> str:
    done = subprocess.run(cmd, cwd=repo, env=tool_env(repo), capture_output=True, text=True)
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise SparkError(f"{what or ' '.join(cmd)} failed: "
                         f"{message[-1] if message else f'exit {done.returncode}'}")
    return done.stdout


LOCAL_REMOTES = "sweep-remote"     # under the project root's out/
DRIVERS_LOCK = "sweep-remote.lock"  # out/'s: what two drivers in one checkout take turns at
LOCAL_DVC_REMOTE = "spark-sweep"   # its name in .dvc/config.local, here and in the clones
BASE_REF = "refs/heads/spark-sweep-base"


def plan_sweep(repo: Path, specs: list[str], git_remote: str | None = None,
               dvc_remote: str | None = None, one_machine: bool = False,
               say=lambda line: None) -> SweepPlan:
    """Check the checkout can be swept from and expand the grid; every mistake is one
    line. `one_machine` with no remote named nor shared ones set up: local_remotes."""
    axes = [parse_axis(s) for s in specs]
    commit, params = baseline(repo)
    points = expand(axes, params)
    return replace(plan_remotes(repo, commit, git_remote, dvc_remote, one_machine, say),
                   axes=tuple(axes), points=tuple(points))


def baseline(repo: Path, command: str = "spark sweep") -> tuple[str, dict]:
    """(HEAD's full sha, params.yaml): the commit the workers run, refused when dirty."""
    if not (repo / ".dvc").is_dir() or not (repo / "dvc.yaml").is_file():
        raise SparkError(f"run {command} inside the project (no .dvc/ and "
                         f"dvc.yaml in {repo.name or repo})")
    commit = _tool(repo, "git", "rev-parse", "HEAD", what="git rev-parse HEAD").strip()
    dirty = [line[3:] for line in _tool(repo, "git", "status", "--porcelain",
                                        "--untracked-files=no").split("\n") if line.strip()]
    if dirty:
        raise SparkError(f"uncommitted changes ({', '.join(dirty[:3])}); the workers run "
                         f"commit {commit[:12]}: commit (and push) them first")
    return commit, load_yaml(read_input(repo / PARAMS_FILE, "params file"), PARAMS_FILE) or {}


def plan_remotes(repo: Path, commit: str, git_remote: str | None = None,
                 dvc_remote: str | None = None, one_machine: bool = False,
                 say=lambda line: None) -> SweepPlan:
    """A plan with no points yet: where the workers clone `commit` from and push to."""
    if one_machine and git_remote is None and dvc_remote is None \
            and not (_remote_url(repo, "origin") is not None and _project_remote(repo)):
        git_url, store = local_remotes(repo, commit, say)
        return SweepPlan(repo, commit, git_url, git_url, LOCAL_DVC_REMOTE, (),
                         dvc_remote_url=store)
    git_remote = git_remote or "origin"
    git_url = _git_url(repo, git_remote)
    _tool(repo, "git", "fetch", "-q", git_remote, what=f"git fetch {git_remote}")
    holders = _tool(repo, "git", "branch", "-r", "--contains", commit).split()
    if not any(h.startswith(f"{git_remote}/") for h in holders):
        raise SparkError(f"commit {commit[:12]} is not on git remote {git_remote!r}; the "
                         f"workers clone it from there: `git push {git_remote} HEAD` first")
    _check_dvc_remote(repo, dvc_remote)
    return SweepPlan(repo, commit, git_remote, git_url, dvc_remote, ())


def _remote_url(repo: Path, remote: str) -> str | None:
    done = subprocess.run(["git", "remote", "get-url", remote], cwd=repo, capture_output=True,
                          text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def _project_remote(repo: Path) -> str:
    """The committed default DVC remote's name ("" when there is none)."""
    done = subprocess.run(["dvc", "config", "--project", "core.remote"], cwd=repo,
                          env=tool_env(repo), capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def local_remotes(repo: Path, commit: str, say) -> tuple[str, str]:
    """(git URL, DVC store) of a one-machine sweep: a bare repository and a folder under
    out/sweep-remote/, the commit pushed there, the store in .dvc/config.local."""
    base = repo / OUT / LOCAL_REMOTES
    bare, store = base / "git", base / "dvc"
    with held(repo / OUT / DRIVERS_LOCK):   # a second driver started now waits, then finds them
        if not (bare / "HEAD").is_file():
            bare.mkdir(parents=True, exist_ok=True)
            _tool(repo, "git", "init", "-q", "--bare", str(bare), what="git init --bare")
        store.mkdir(parents=True, exist_ok=True)
        _tool(repo, "git", "push", "-q", "-f", str(bare), f"{commit}:{BASE_REF}",
              what="git push to the local sweep remote")
        _tool(repo, "dvc", "remote", "add", "--local", "-f", LOCAL_DVC_REMOTE, str(store),
              what="dvc remote add --local")
    shown = os.path.relpath(base)
    say(f"no shared remotes (git origin + a committed DVC remote): using a local bare git "
        f"repository {shown}/git and a local DVC store {shown}/dvc (DVC remote "
        f"{LOCAL_DVC_REMOTE!r} in .dvc/config.local); for a cluster, see README "
        f"\"Sweeping on a cluster\"")
    return str(bare), str(store)


def _git_url(repo: Path, remote: str) -> str:
    url = _remote_url(repo, remote)
    if url is None:
        raise SparkError(f"no git remote {remote!r}: the workers clone the shared repository "
                         f"from it (`git remote add {remote} URL` and push)")
    local = Path(url) if Path(url).is_absolute() else repo / url
    if "://" not in url and local.exists():
        return str(local.resolve())  # workers clone from elsewhere: no relative paths
    return url


def _check_dvc_remote(repo: Path, name: str | None) -> None:
    """The workers' clones see only the committed .dvc/config: the remote must be there."""
    listed = _tool(repo, "dvc", "remote", "list", "--project", what="dvc remote list")
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    if name is None:
        name = _project_remote(repo)
        if not name:
            raise SparkError("no default DVC remote in .dvc/config: the workers push their "
                             "outputs there (`dvc remote add -d store s3://bucket/path`, "
                             "then commit .dvc/config)")
    if name not in names:
        raise SparkError(f"DVC remote {name!r} is not in the committed .dvc/config (known: "
                         f"{', '.join(names) or 'none'}); `dvc remote add` it without --local")


def existing_experiments(plan: SweepPlan) -> tuple[set[str], set[str]]:
    """(names on the git remote, names in this checkout) at the baseline commit."""
    def names(*where: str) -> set[str]:
        with held(plan.repo / OUT / DRIVERS_LOCK):   # not beside another driver's pull
            out = _tool(plan.repo, "dvc", "exp", "list", *where, "--rev", plan.commit,
                        "--name-only", what="dvc exp list")
        return {line.strip() for line in out.splitlines() if line.strip()}
    return names(plan.git_remote), names()


@contextlib.contextmanager
def cluster_client(scheduler: str | None, workers: int, scratch: str | None):
    """A Client of the Dask scheduler at `scheduler`, or of a LocalCluster of `workers`
    started here. A LocalCluster's Dask scratch (its `temporary-directory`, the scheduler's
    and the workers') is a folder of this process's in the workers' temp dir, and once it is closed its workers are gone: the scratch goes, and
    so do the clones they left (a Ctrl-C, a worker killed), with whatever still runs in
    them (sweep/clones.py). $TMPDIR is then as it was."""
    if scheduler:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as err:
            raise SparkError(f"cannot reach the Dask scheduler at {scheduler}: {err}") from None
        try:
            yield client
        finally:
            client.close()
        return
    temp = scratch_folder(scratch)
    try:
        with owned_folder("dask", temp) as dask_scratch, \
                dask.config.set({"temporary-directory": str(dask_scratch)}):
            # silence_logs: Dask logs a heartbeat cut off by the shutdown with a traceback;
            # dashboard ":0": None still binds port 8787 and warns when another cluster
            # holds it; preload: Ctrl-C ends a worker without a traceback of its own
            # (sweep/quiet_workers.py)
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address=":0",
                                   silence_logs=logging.CRITICAL,
                                   preload=[quiet_workers.__name__])
            try:
                client = Client(cluster)
                try:
                    yield client
                finally:
                    logging.getLogger("distributed").setLevel(logging.CRITICAL)  # its chatter
                    client.close()
            finally:
                cluster.close()
    finally:
        remove_dead(temp)


def run_points(plan: SweepPlan, todo: list[Point], scheduler: str | None, workers: int,
               scratch: str | None, progress, tick=lambda state: None) -> dict[str, dict]:
    """name -> the worker's record, each point a task on the cluster, in completion order."""
    if not todo:
        return {}
    records = {}
    with cluster_client(scheduler, workers, scratch) as client:
        progress(f"running {len(todo)} point(s) on {len(client.scheduler_info()['workers'])} "
                 f"Dask worker(s) ({scheduler or 'LocalCluster on 127.0.0.1'})")
        futures = {submit_point(client, plan, point.name, point.overrides, scratch): point
                   for point in todo}
        for future in finished(client, futures, progress):
            point = futures[future]
            try:
                record = future.result()
            except Exception as err:  # the task itself died (worker lost, import error)
                record = task_failed(point.name, err)
            records[point.name] = record
            took = f" in {record['seconds']:.1f}s" if record.get("seconds") else ""
            progress(f"{point.name} {' '.join(point.overrides)}: {record['state']}{took}"
                     + (f": {record['error']}" if record["error"] else ""))
            tick(record["state"])
    return records


HEARTBEAT_S = 30.0   # with no point finished for this long, a line says the sweep is alive


def finished(client, futures, progress, every: float = HEARTBEAT_S, clock=time.monotonic):
    """Each future as it finishes; while none does, a line every `every` seconds saying how
    many points run and wait, and for how long (a point clones, runs, pushes: minutes)."""
    pending, started = set(futures), clock()
    while pending:
        try:
            done, pending = wait(pending, timeout=every, return_when="FIRST_COMPLETED")
        except TimeoutError:
            # a worker thread runs one point at a time; the rest wait for one
            running = min(len(pending), sum(client.nthreads().values()))
            minutes, seconds = divmod(int(clock() - started), 60)
            progress(f"{running} point(s) running, {len(pending) - running} waiting for a "
                     f"worker, {len(futures) - len(pending)} finished ({minutes}m{seconds:02d}s)")
            continue
        yield from done


def submit_point(client, plan: SweepPlan, name: str, overrides, scratch: str | None,
                 monitor: Monitor | None = None):
    """One `run_point` task on the cluster: the Future of its record."""
    job = PointJob(plan.git_url, plan.commit, name, tuple(overrides), plan.dvc_remote, scratch,
                   plan.dvc_remote_url, monitor)
    return client.submit(run_point, job, key=f"{name}-{plan.commit[:12]}", pure=False)


def task_failed(name: str, err: BaseException) -> dict:
    """The record of a point whose Dask task itself died (worker lost, import error)."""
    return {"name": name, "state": "failed", "seconds": None,
            "error": f"the Dask task failed: {type(err).__name__}: {err}"}


def compare(plan: SweepPlan, failures: dict[str, str]) -> dict:
    """The sweep's comparison document (see grid.py), in grid order."""
    with DvcExperiments(str(plan.repo)) as source:
        found = experiments_of(source, plan.commit)
    exps = {p.name: None if p.name in failures else found.get(p.name) for p in plan.points}
    points = [point_record(p, exps[p.name], (exps[p.name] or {}).get("outputs", {}),
                           failures.get(p.name)) for p in plan.points]
    return {"baseline": plan.commit, "axes": [[a.key, list(a.values)] for a in plan.axes],
            "points": points}


def sweep(plan: SweepPlan, scheduler: str | None, workers: int, scratch: str | None,
          progress, tick=lambda state: None) -> dict:
    """Run the points not yet on the remote, pull them, compare. `progress(line)`
    gets a line per event, `tick(state)` is called once per point resolved
    ("done" or "failed", a skipped point as "done")."""
    failures = {p.name: p.error for p in plan.points if p.error}
    on_remote, local = existing_experiments(plan)
    todo = []
    for point in plan.points:
        if point.error:
            progress(f"{point.name} {' '.join(point.overrides)}: failed: {point.error}")
            tick("failed")
        elif point.name in on_remote or point.name in local:
            progress(f"{point.name} {' '.join(point.overrides)}: already on the remote, "
                     f"not run again")
            tick("done")
        else:
            todo.append(point)
    records = run_points(plan, todo, scheduler, workers, scratch, progress, tick)
    failures.update({n: r["error"] for n, r in records.items() if r["state"] != "done"})
    pull(plan, [p.name for p in plan.points if p.name not in failures and p.name not in local])
    return compare(plan, failures)


def pull(plan: SweepPlan, names: list[str]) -> None:
    """`dvc exp pull` the named experiments the workers pushed."""
    if names:
        remote = ["-r", plan.dvc_remote] if plan.dvc_remote else []
        with held(plan.repo / OUT / DRIVERS_LOCK):   # DVC's own lock gives up in seconds
            _tool(plan.repo, "dvc", "exp", "pull", *remote, plan.git_remote, *names,
                  what="dvc exp pull")
