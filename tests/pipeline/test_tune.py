"""`spark tune` with the real dvc on a Dask LocalCluster of two single-threaded workers,
the default tiny job, a bare git repository and a local folder as the remotes (as
test_sweep.py sets them up): every trial is a DVC experiment that `dvc exp show` lists
and `spark compare --where` picks; a driver killed mid-study loses no completed trial
when started again and runs none twice; and a pruned trial's experiment is its run again
with step.stop_after_pass, the same bytes as a plain `dvc exp run` of those params."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from .conftest import REPO, dvc_json, exp_revs, shared_checkout, tool_env

optuna = pytest.importorskip("optuna")

from sparktrain.sweep import study as studies  # noqa: E402
from sparktrain.sweep.monitor import TrialMonitor  # noqa: E402

pytestmark = pytest.mark.e2e
README = (REPO / "docs" / "experiments.md").read_text()   # the walk-through README links

# README's line, as written: a small space on the tiny pairs job (step.outer 2..3 keeps
# each trial short), 3 trials on 2 workers
README_LINE = README.split("\n## Tuning with Optuna\n", 1)[1].split("```sh\n", 1)[1] \
    .split("\n", 1)[0]
SPACE = tuple(shlex.split(README_LINE)[2:8])


# a study of a few trials of a few seconds each: minutes on a busy machine, never an hour
TUNE_GUARD_S = 900


def spark(repo, *args, timeout=TUNE_GUARD_S, env=None):
    """`spark ARGS` in its own session, stdout and stderr together; past `timeout` the test
    fails with the session's processes (what each was doing) and kills them all: a driver
    and its cluster never outlive the test."""
    proc = subprocess.Popen([sys.executable, "-m", "sparktrain.cli", *args], cwd=repo,
                            env=env or tool_env(repo), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            forest = subprocess.run(["ps", "-s", str(proc.pid), "-o",
                                     "pid,ppid,stat,etime,wchan:20,args", "--forest"],
                                    capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as err:
            forest = f"(ps failed: {err})"
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"spark {' '.join(args)} ran past {timeout} s; its output:\n{out}\n"
                    f"its processes then:\n{forest}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def _study(repo, name):
    storage = studies.open_storage(studies.default_storage(repo))
    return optuna.load_study(study_name=name, storage=storage)


@pytest.fixture(scope="module")
def shared(template_repo, tmp_path_factory):
    return shared_checkout(template_repo, tmp_path_factory.mktemp("tune"))


@pytest.fixture(scope="module")
def tuned(shared):
    argv = shlex.split(README_LINE)
    assert argv[:2] == ["spark", "tune"] and argv[8:] == ["--trials", "3", "--study", "t",
                                                          "--workers", "2"], argv
    done = spark(shared, *argv[1:])
    return done, _study(shared, "t")


def test_tune_runs_every_trial_as_an_experiment(shared, tuned):
    done, study = tuned
    assert done.returncode == 0, done.stdout
    assert "Traceback" not in done.stdout
    trials = study.get_trials()
    finished = [t for t in trials if t.state in studies.FINISHED]
    assert len(finished) == 3 and len(trials) == 3, [t.state for t in trials]
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    shown = {e["name"]: e for e in exp_revs(dvc_json(shared, "exp", "show"))}
    for t in complete:
        exp = shown[f"tune-t-{t.number}"]
        data = exp["data"]
        step = data["params"]["params.yaml"]["data"]["step"]
        assert step["lr"] == pytest.approx(t.params["step.lr"], rel=1e-12)
        assert (step["outer"], step["seed"]) == (t.params["step.outer"],
                                                 int(t.params["step.seed"]))
        loss = data["metrics"]["out/train/job-dry-001/eval.json"]["data"]["loss"]
        assert t.value == pytest.approx(loss, rel=1e-6)
        assert len(t.intermediate_values) == t.params["step.outer"]   # one per pass
    best = min(complete, key=lambda t: t.value)
    lines = done.stdout.splitlines()
    assert f"best: dvc exp apply tune-t-{best.number}" in lines
    head = next(ln for ln in lines if ln.startswith("Trial "))
    assert head.split() == ["Trial", "Experiment", "step.lr", "step.outer", "step.seed",
                            "loss", "Seconds"]
    assert (shared / "out" / "tune-t.png").read_bytes()[:4] == b"\x89PNG"
    # README's second line: every trial with step.seed 1, and no other
    compare = README.split("\n## Tuning with Optuna\n", 1)[1].split("```sh\n", 1)[1] \
        .splitlines()[1].split("#")[0].split()
    picked = spark(shared, *compare[1:], "--json")
    wanted = {f"tune-t-{t.number}" for t in complete if t.params["step.seed"] == "1"}
    if not wanted:   # the sampler drew seed 0 three times
        assert picked.returncode == 2 and "no experiment has step.seed=1" in picked.stdout
        return
    assert picked.returncode == 0, picked.stdout
    assert {e["name"] for e in json.loads(picked.stdout)["experiments"]} == wanted


def test_a_resumed_study_keeps_its_trials_and_refuses_another_space(shared, tuned):
    _, study = tuned
    before = {t.number: t.value for t in study.get_trials()}
    again = spark(shared, "tune", *SPACE, "--trials", "3", "--study", "t", "--workers", "2")
    assert again.returncode == 0, again.stdout
    assert "already holds 3 finished trials" in again.stdout, again.stdout
    assert "Dask worker" not in again.stdout and " started" not in again.stdout
    assert {t.number: t.value for t in _study(shared, "t").get_trials()} == before
    other = spark(shared, "tune", "-S", "step.lr=0.01..0.2", "--study", "t")
    assert other.returncode == 2
    assert other.stdout.strip().splitlines() == [
        "spark: error: study 't' holds another search space (-S step.lr=log:0.01..0.3 "
        "-S step.outer=int:2..3 -S step.seed=0,1); give those -S again to resume it, or "
        "another --study"]


@pytest.mark.parametrize("args, needle", [
    (("-S", "step.lr=0.3..0.01"), "the range 0.3..0.01 is inverted"),
    (("-S", "step.lr=log:x..1"), "'x' is not a number (log range)"),
    (("-S", "step.outr=int:1..3"), "no key step.outr; did you mean 'step.outer'?"),
    (("-S", "step.lr=0.1..0.2", "--storage", "nosuchdb://x/y"),
     "cannot open the study storage nosuchdb://x/y"),
    (("-S", "step.lr=0.1..0.2", "--study", "a b"), "a study name is letters"),
    # each checked before the study is made or changed
    (("-S", "step.lr=0.1..0.2", "--objective", "bpbb"), "did you mean 'bpb'?"),
    (("-S", "step.lr=0.1..0.2", "--seed", "-1"), "a seed is 0 to 2**32-1"),
    (("-S", "step.lr=0.1..0.2", "--workers", "5000"), "--workers 5000: this machine has"),
    (("-S", "step.lr=0.1..0.2", "--storage", "sqlite://"), "the workers cannot reach"),
])
def test_tune_mistakes_are_one_line(shared, args, needle):
    done = spark(shared, "tune", *args)
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and needle in lines[0], done.stdout


def test_a_killed_driver_resumes_without_losing_or_repeating_a_trial(shared, tmp_path):
    cmd = [sys.executable, "-m", "sparktrain.cli", "tune", *SPACE, "--trials", "4",
           "--study", "k", "--workers", "2"]
    env = {**tool_env(shared), "TMPDIR": str(tmp_path)}   # where the workers clone
    first = subprocess.Popen(cmd, cwd=shared, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + TUNE_GUARD_S
    try:
        while True:   # kill it (and its cluster) once a trial is complete and others run
            assert first.poll() is None, "the driver ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(1)
            if not (shared / "out" / "tune.db").exists():
                continue
            try:
                states = [t.state for t in _study(shared, "k").get_trials()]
            except KeyError:   # the study is not created yet
                continue
            if optuna.trial.TrialState.COMPLETE in states and \
                    optuna.trial.TrialState.RUNNING in states:
                break
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    kept = {t.number: (t.params, t.value) for t in _study(shared, "k").get_trials()
            if t.state == optuna.trial.TrialState.COMPLETE}
    cut = [t.number for t in _study(shared, "k").get_trials()
           if t.state == optuna.trial.TrialState.RUNNING]
    assert kept and cut
    assert any(p.name.startswith("spark-tmp-") for p in tmp_path.iterdir())   # Dask's, ...

    done = spark(shared, "tune", *SPACE, "--trials", "4", "--study", "k", "--workers", "2",
                 env=env)
    assert done.returncode == 0, done.stdout
    assert list(tmp_path.iterdir()) == []   # the killed driver's clones went with this run
    trials = _study(shared, "k").get_trials()
    assert {t.number: (t.params, t.value) for t in trials if t.number in kept} == kept
    finished = [t for t in trials if t.state in studies.FINISHED]
    assert len(finished) == 4, [(t.number, t.state) for t in trials]
    # the cut trials failed as stale and ran again under new numbers, each once
    assert all(trials[n].state == optuna.trial.TrialState.FAIL for n in cut)
    retried = [t for t in trials if t.system_attrs.get("failed_trial") in cut]
    assert sorted(t.system_attrs["failed_trial"] for t in retried) == sorted(cut)
    # one experiment per complete trial and per pruned one (its run again, cut at the pass
    # it was stopped after), none for the killed driver's (their runs never finished)
    names = {e["name"] for e in exp_revs(dvc_json(shared, "exp", "show"))
             if e["name"].startswith("tune-k-")}
    assert names == {f"tune-k-{t.number}" for t in trials
                     if t.state == optuna.trial.TrialState.COMPLETE
                     or studies.STOPPED_ATTR in t.user_attrs}
    assert not names & {f"tune-k-{n}" for n in cut}


class _StopAfterTwoPasses:
    """A monitor that stops the run once its held-out curve has two passes, and cuts it
    there (as spark tune's does when the pruner stops a trial after pass 2)."""
    stopped_after = 0

    def poll(self, clone):
        folder = TrialMonitor("", "", 0, "loss", True)._job_folder(clone)
        passes = len(TrialMonitor("", "", 0, "loss", True)._curve(folder))
        if passes >= 2:
            self.stopped_after = passes
        return passes >= 2

    def cut(self, clone):
        return f"++step.stop_after_pass={self.stopped_after}"

    def result(self, clone):
        return {"passes": self.stopped_after}


def _exp_file(shared, name, path):
    """`path` at experiment `name`'s commit on the shared git remote."""
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"],
                          cwd=shared.parent / "origin.git", capture_output=True, text=True,
                          check=True).stdout.split()
    ref = next(r for r in refs if r.endswith(f"/{name}"))
    return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=shared.parent / "origin.git",
                          capture_output=True, text=True, check=True).stdout


def test_a_stopped_trial_is_kept_as_the_run_that_ends_where_it_stopped(shared, monkeypatch):
    """A pruned trial's experiment is the trial's run again with step.stop_after_pass k:
    its params say what made its outputs, and a plain `dvc exp run` of those params in
    another clone (no cache shared) makes the same weights, to the byte."""
    import yaml
    from sparktrain.sweep import driver, point

    monkeypatch.setattr(point, "POLL_S", 0.2)
    commit, _ = driver.baseline(shared)
    plan = driver.plan_remotes(shared, commit, one_machine=True)
    sets = ("step.outer=300", "step.lr=0.02")   # long enough to be caught mid-run
    job = point.PointJob(plan.git_url, commit, "cut-1", sets, plan.dvc_remote,
                         monitor=_StopAfterTwoPasses())
    record = point.run_point(job)
    assert record["state"] == "stopped" and record["error"] is None, record
    assert "result" in record, record
    k = record["result"]["passes"]
    assert record["cut"] == f"++step.stop_after_pass={k}" and 2 <= k < 300
    plain = point.run_point(point.PointJob(plan.git_url, commit, "plain-1",
                                           (*sets, f"++step.stop_after_pass={k}"),
                                           plan.dvc_remote))
    assert plain["state"] == "done", plain
    locks = {n: yaml.safe_load(_exp_file(shared, n, "dvc.lock")) for n in ("cut-1", "plain-1")}
    step = locks["cut-1"]["stages"]["step"]
    assert step["params"]["params.yaml"]["step"] == \
        yaml.safe_load(_exp_file(shared, "cut-1", "params.yaml"))["step"]
    assert (step["params"]["params.yaml"]["step"]["outer"],
            step["params"]["params.yaml"]["step"]["stop_after_pass"]) == (300, k)

    def outs(lock):
        return {o["path"]: o["md5"] for o in lock["stages"]["step"]["outs"]}
    assert outs(locks["cut-1"]) == outs(locks["plain-1"])   # the same weights and curves
    # its checkpoint says the run stopped after pass k of 300, and that it learned
    md5 = next(o["md5"] for o in step["outs"] if o["path"].endswith("checkpoint.json"))
    ckpt = json.loads((shared.parent / "dvc-store" / "files" / "md5" / md5[:2] / md5[2:])
                      .read_text())
    assert (ckpt["outer"], ckpt["stop_after_pass"], ckpt["micro_steps"]) == (300, k, k * 8)
    assert len(ckpt["loss_curve"]) == k + 1 and ckpt["trained"] is True


def test_spark_tune_keeps_a_pruned_trial_as_an_experiment(shared):
    """Through the command: a study whose three finished trials reached 0.0 after every
    pass prunes the next at its first poll; the trial is pruned (not failed) and its
    experiment, pulled back, has step.stop_after_pass K and the metrics of those K passes."""
    from sparktrain.sweep import driver
    from sparktrain.sweep.space import distributions, parse_space

    specs = ("-S", "step.lr=log:0.01..0.03", "-S", "step.outer=400")
    _, params = driver.baseline(shared)
    dims = parse_space(list(specs[1::2]), params)
    study = studies.open_study(studies.open_storage(studies.default_storage(shared)), "p", dims,
                               "auto", 4, 0, True)
    for lr in (0.01, 0.02, 0.03):
        study.add_trial(optuna.trial.create_trial(
            params={"step.lr": lr, "step.outer": "400"}, distributions=distributions(dims),
            value=0.0, intermediate_values={k: 0.0 for k in range(1, 401)}))
    done = spark(shared, "tune", *specs, "--trials", "4", "--study", "p", "--workers", "1")
    # exit 1: the best complete trials are the made-up ones, which have no experiment
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    pruned = _study(shared, "p").get_trials()[3]
    assert pruned.state == optuna.trial.TrialState.PRUNED, done.stdout
    k = pruned.user_attrs[studies.STOPPED_ATTR]
    assert 2 <= k == max(pruned.intermediate_values) < 400
    assert "(1 kept as experiments with step.stop_after_pass)" in done.stdout
    shown = {e["name"]: e for e in exp_revs(dvc_json(shared, "exp", "show"))}
    data = shown["tune-p-3"]["data"]
    step = data["params"]["params.yaml"]["data"]["step"]
    assert (step["outer"], step["stop_after_pass"]) == (400, k)
    assert step["lr"] == pytest.approx(pruned.params["step.lr"], rel=1e-12)
    loss = data["metrics"]["out/train/job-dry-001/eval.json"]["data"]["loss"]
    assert pruned.user_attrs["reached"] == pytest.approx(loss, rel=1e-6)
