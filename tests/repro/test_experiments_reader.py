"""The one reader of DVC experiments (sparktrain/eval/experiments.py): its size
bound and, with the real dvc, a tiny project with two experiments (listed from
git's refs, oldest first). tests/reliability/test_rel_round5_read.py reads
experiments made with git's plumbing."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktrain.core.errors import SparkError
from sparktrain.eval import experiments as ex

class _FakeRepo:
    """A dvc.repo.Repo at one rev whose every file holds `data`."""

    def __init__(self, data: bytes):
        self.data = data
        self.dvcfs = self

    @contextlib.contextmanager
    def open(self, path, mode="r"):
        assert mode == "rb"
        yield io.BytesIO(self.data)


def _reader(data: bytes) -> ex.DvcExperiments:
    reader = ex.DvcExperiments()
    reader._at = lambda rev: _FakeRepo(data)
    return reader


def test_a_read_is_bounded():
    with pytest.raises(SparkError, match="larger than"):
        _reader(b"x" * (ex.MAX_FILE_BYTES + 1)).read("out/big.json", "abc1234")
    assert _reader(b"x" * ex.MAX_FILE_BYTES).read("out/big.json", "abc1234") == \
        b"x" * ex.MAX_FILE_BYTES
    with pytest.raises(SparkError, match="NaN is not a JSON number"):
        ex.read_json_at(_reader(b"[1, NaN]"), "out/eval.json", "abc1234")


def _run(cwd, *cmd):
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.e2e
def test_the_real_dvc_lists_and_reads_two_experiments(tmp_path, monkeypatch):
    dvc = [sys.executable, "-m", "dvc"]
    _run(tmp_path, "git", "init", "-q")
    _run(tmp_path, *dvc, "init", "-q")
    (tmp_path / "params.yaml").write_text("step:\n  lr: 0.1\n")
    (tmp_path / "run.py").write_text(
        "import json, yaml\nlr = yaml.safe_load(open('params.yaml'))['step']['lr']\n"
        "json.dump({'loss': lr * 2}, open('out.json', 'w'))\n")
    (tmp_path / "dvc.yaml").write_text(
        f"stages:\n  s:\n    cmd: {sys.executable} run.py\n    deps: [run.py]\n"
        "    params: [step]\n    outs: [out.json]\n")
    _run(tmp_path, *dvc, "repro", "-q")
    _run(tmp_path, "git", "add", "-A")
    _run(tmp_path, "git", "commit", "-qm", "base")
    for lr in ("0.2", "0.3"):
        _run(tmp_path, *dvc, "exp", "run", "-q", "-S", f"step.lr={lr}")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")      # from a subfolder too: paths are the root's
    reader = ex.DvcExperiments()
    experiments, baselines = reader.rows()
    assert len(experiments) == 2 and len(baselines) == 1
    # each experiment's own output, from the cache by its commit's dvc.lock
    losses = [json.loads(reader.read("out.json", r.rev))["loss"] for r in experiments]
    assert losses == [0.4, 0.6]                        # oldest first
    assert ex.read_yaml_at(reader, "params.yaml", experiments[0].rev) == {"step": {"lr": 0.2}}
    assert reader.read("no-such-file", experiments[0].rev) is None
    reader.close()
    monkeypatch.chdir(Path(tmp_path).parent)
    with pytest.raises(SparkError, match="cannot run git|`git rev-parse` failed"):
        ex.DvcExperiments(str(tmp_path / "nowhere")).rows()
