"""Two `spark tune` drivers on one study, started at the same instant in a fresh clone
with no remotes and no study yet: both would create the SQLite tables (alembic's UNIQUE
version row) and push to the local sweep remote at once. They take turns there, share
the trials, and both end well (docs/tuning.md "Tuning")."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from sparkhelp import HANG_GUARD_S

from .conftest import clone, tool_env

optuna = pytest.importorskip("optuna")

from sparktrain.sweep import study as studies  # noqa: E402

pytestmark = pytest.mark.e2e

# one short trial each (the tiny pairs job, 2 or 3 passes); the same space in both
ARGS = ("tune", "-S", "step.lr=log:0.01..0.3", "-S", "step.outer=int:2..3", "--trials", "2",
        "--study", "d", "--workers", "1", "--no-prune")
AT_ONCE = """
import sys, time
from sparktrain.cli import main
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
sys.exit(main(sys.argv[2:]))
"""


def test_two_drivers_started_together_on_a_fresh_clone_share_the_study(template_repo,
                                                                        tmp_path):
    repo = clone(template_repo, tmp_path / "repo")
    start = str(time.time() + 8)   # both past their imports, then the same instant
    drivers = [subprocess.Popen([sys.executable, "-c", AT_ONCE, start, *ARGS], cwd=repo,
                                env=tool_env(repo), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
               for _ in range(2)]
    outs = [driver.communicate(timeout=HANG_GUARD_S)[0] for driver in drivers]
    for driver, out in zip(drivers, outs):
        assert driver.returncode == 0 and "Traceback" not in out, out
    study = optuna.load_study(study_name="d", storage=studies.open_storage(
        studies.default_storage(repo)))
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2, trials
    # each driver ran one of them (neither ran the study alone)
    assert all(out.count(": started") == 1 for out in outs), outs
