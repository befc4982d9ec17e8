"""DvcExperiments reads experiments from git's refs/exps: HEAD's by rows(), and the
baseline commit of a named experiment on any commit by baseline_of() (so `spark
compare NAME` finds an experiment of an earlier commit)."""
import subprocess

from sparktrain.eval.experiments import DvcExperiments


def git(repo, *args) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                                           "PATH": "/usr/bin:/bin"})
    return done.stdout.strip()


def test_baseline_of_finds_an_experiment_of_an_earlier_commit(tmp_path):
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    old = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "exp on one")
    exp_commit = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "update-ref", f"refs/exps/{old[:2]}/{old[2:]}/ruddy-hunk", exp_commit)
    git(tmp_path, "reset", "-q", "--hard", old)
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "two")
    source = DvcExperiments(str(tmp_path))
    assert source.rows() == ([], [])                          # none on HEAD
    assert source.baseline_of("ruddy-hunk") == old
    assert source.baseline_of("other") is None
    exps, bases = source.rows(old[:7])
    assert [(e.name, e.rev, e.baseline) for e in exps] == [("ruddy-hunk", exp_commit, old[:7])]
    assert [b.rev for b in bases] == [old]
