"""A project copy (tests, tools) carries no DVC remote of the user's: after README's
"Share results" commits a remote `store`, the tests that add their own `store` to a copy
failed with `remote 'store' already exists`."""
from __future__ import annotations

import subprocess
import sys

from sparktrain.repro.toolenv import copy_project, tool_env, without_remotes

SHARED = """[core]
    analytics = false
    remote = store
['remote "store"']
    url = /mnt/team/dvc-store
['remote "s3"']
    url = s3://bucket/path
[plots]
    html_template = ../build/dvc-plots.html
"""


def test_without_remotes_keeps_every_other_setting():
    assert without_remotes(SHARED) == ("[core]\n    analytics = false\n"
                                       "[plots]\n    html_template = ../build/dvc-plots.html\n")
    assert without_remotes("[core]\n    analytics = false\n") == "[core]\n    analytics = false\n"


def test_a_copy_of_a_project_with_a_committed_remote_takes_its_own(tmp_path):
    src = tmp_path / "src"
    (src / ".dvc").mkdir(parents=True)
    (src / ".dvc" / "config").write_text(SHARED)
    (src / "params.yaml").write_text("job: a\n")
    env = tool_env()
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "shared remote"]):
        subprocess.run(["git", *args], cwd=src, env=env, check=True)
    copy = copy_project(src, tmp_path / "copy")
    assert "store" not in (copy / ".dvc" / "config").read_text()
    assert "html_template" in (copy / ".dvc" / "config").read_text()
    done = subprocess.run([sys.executable, "-m", "dvc", "remote", "add", "-d", "store",
                           str(tmp_path / "mine")], cwd=copy, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert "store" in (src / ".dvc" / "config").read_text(), "the project itself is untouched"
