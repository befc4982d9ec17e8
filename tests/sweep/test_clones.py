"""A point's clone and its owner (sparktrain/sweep/clones.py): a live owner's clone is
never touched, a dead owner's (SIGKILL) is removed by whoever next makes a clone there,
with the process it left working in it, and nothing but our clones is removed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from sparktrain.sweep.clones import PREFIX, owned_folder, remove_dead

OWNER = """
import subprocess, sys, time
from pathlib import Path
from sparktrain.sweep.clones import owned_folder
with owned_folder("p-1", Path(sys.argv[1])) as clone:
    (clone / "work").write_text("x")
    orphan = subprocess.Popen(["sleep", "300"], cwd=clone)
    print(clone, orphan.pid, flush=True)
    time.sleep(300)
"""


def test_a_live_owners_clone_stays_and_goes_with_its_block(tmp_path):
    with owned_folder("p-0", tmp_path) as clone:
        assert clone.is_dir() and clone.name.startswith(PREFIX + "p-0-")
        (clone / "f").write_text("x")
        assert remove_dead(tmp_path) == [] and (clone / "f").is_file()
    assert list(tmp_path.iterdir()) == []


def test_a_killed_owners_clone_and_its_orphan_go_with_the_next_clone(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
    clone, orphan = owner.stdout.readline().split()
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    assert (tmp_path / clone).is_dir() and psutil.pid_exists(int(orphan))
    (tmp_path / "spark-other").mkdir()                    # not a clone: never touched
    (tmp_path / f"{PREFIX}link").symlink_to(tmp_path / "spark-other")
    with owned_folder("p-2", tmp_path) as fresh:
        assert not (tmp_path / clone).exists()
        deadline = time.monotonic() + 10
        while psutil.pid_exists(int(orphan)) and \
                psutil.Process(int(orphan)).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the orphan still runs"
            time.sleep(0.1)
        assert fresh.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{PREFIX}link", "spark-other"])
