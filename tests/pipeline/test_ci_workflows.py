"""The CI a user copies (docs/ci.md): .github/workflows/ validates against GitHub's workflow
schema (check-jsonschema's copy, offline), and the pull-request workflow's own `run:` steps,
read from the YAML, run in a fresh clone of a pull-request branch against its base branch,
with `gh` a stand-in that keeps the comment's body (tools/pr_workflow.py, which the README
figure of the report runs too); the report it posts is then read."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkhelp import HANG_GUARD_S

from sparktrain.core.gate import REPORT_MARK

from .conftest import REPO, VENV_BIN, git, run

sys.path.insert(0, str(REPO))
from tools import pr_workflow  # noqa: E402

WORKFLOWS = REPO / ".github" / "workflows"
PR_WORKFLOW = pr_workflow.PR_WORKFLOW
steps = pr_workflow.steps
# the steps GitHub runs for us: what they do is done by the test's set-up
ACTIONS = {"actions/checkout", "actions/setup-python", "actions/upload-artifact"}
JOB = "out/train/job-dry-001"


def check_jsonschema(*paths) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "check-jsonschema"), "--builtin-schema",
                           "vendor.github-workflows", *map(str, paths)],
                          capture_output=True, text=True, timeout=300)


def test_the_workflows_validate_against_githubs_schema(tmp_path):
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["pr-report.yml", "test.yml"]
    done = check_jsonschema(*files)
    assert done.returncode == 0, done.stdout + done.stderr
    # the validator reads the schema: a misspelt key is refused
    broken = tmp_path / "broken.yml"
    broken.write_text(PR_WORKFLOW.read_text().replace("runs-on:", "run-on:"))
    assert check_jsonschema(broken).returncode == 1


def test_the_test_workflow_runs_what_ci_runs():
    [*_, last] = steps(WORKFLOWS / "test.yml")
    assert last["run"].strip() == ".ci/run"
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_run_steps_are_plain_bash_and_the_other_steps_known_actions():
    for step in steps():
        if "run" in step:   # GitHub's expressions only in env:, so a clone runs them as they are
            assert "${{" not in step["run"], step["run"]
        else:
            assert step["uses"].split("@")[0] in ACTIONS, step


@pytest.mark.e2e
@pytest.mark.slow
def test_the_pull_request_workflow_posts_one_report(fresh_repro, tmp_path):
    done = pr_workflow.run_workflow(fresh_repro[0], tmp_path, REPO, timeout=HANG_GUARD_S)
    assert len(done.ran) == 7, done.ran
    assert done.gh_args[:5] == ["pr", "comment", "7", "--body-file", "report.md"]
    _check_report(done.body, fresh_repro[0], done.repo)
    assert (done.repo / "report.png").read_bytes().startswith(b"\x89PNG")


def _check_report(body: str, base: Path, head: Path) -> None:
    """The verdict, the metrics of both runs as their eval.json holds them, the one
    param that differs, the changed curves drawn."""
    assert body.startswith(REPORT_MARK.decode() + "\n"), body[:200]
    assert "**Reproducibility** ✅ `repro-check: ok:" in body, body
    was, now = (json.loads((r / JOB / "eval.json").read_text()) for r in (base, head))
    assert was["loss"] != now["loss"]
    assert f"| held-out loss | {was['loss']:.4f} | {now['loss']:.4f} |" in body, body
    assert f"| perplexity | {was['perplexity']:.1f} | {now['perplexity']:.1f} |" in body
    assert "| `step.lr` | `0.03` | `0.05` |" in body
    params = [ln for ln in body.splitlines() if ln.startswith("| `")]
    assert params == ["| `step.lr` | `0.03` | `0.05` |"], "only the param that differs"
    assert body.count("```mermaid") == 2, "training and held-out loss: both changed"
    assert "blue: origin/main; red: this branch" in body


def test_the_report_needs_this_branchs_run(template_copy):
    done = run(template_copy, sys.executable, "-m", "sparktrain.cli", "ci-report",
               "--base", "HEAD", "--out", "report.md")
    assert done.returncode == 2
    assert done.stdout.count("\n") == 1 and "run `dvc repro`" in done.stdout, done.stdout
    assert not (template_copy / "report.md").exists()


def test_a_base_that_is_not_here_is_one_line(template_copy):
    done = run(template_copy, sys.executable, "-m", "sparktrain.cli", "ci-report",
               "--base", "origin/nope", "--out", "report.md")
    assert done.returncode == 2 and done.stdout.count("\n") == 1, done.stdout
    assert "no such commit here" in done.stdout


@pytest.mark.e2e
def test_a_base_whose_outputs_are_not_in_the_cache_is_said_not_guessed(repro_copy):
    git(repro_copy, "add", "-A")
    git(repro_copy, "commit", "-q", "--allow-empty", "-m", "lock")
    shutil.rmtree(repro_copy / ".dvc" / "cache")        # neither pulled nor reproduced
    done = run(repro_copy, sys.executable, "-m", "sparktrain.cli", "ci-report",
               "--base", "HEAD", "--out", "report.md")
    assert done.returncode == 0, done.stdout
    body = (repro_copy / "report.md").read_text()
    now = json.loads((repro_copy / JOB / "eval.json").read_text())
    assert "HEAD's outputs could not be read" in body and "docs/ci.md" in body, body
    assert f"| held-out loss | - | {now['loss']:.4f} |  |" in body, body
    assert "Not known: the base's run is not readable." in body
    assert "**Reproducibility**" not in body, "no --repro-check, no verdict line"
    again = run(repro_copy, sys.executable, "-m", "sparktrain.cli", "ci-report",
                "--base", "HEAD", "--out", "report.md")
    assert again.returncode == 0, "a report this command wrote is replaced"
    (repro_copy / "notes.md").write_text("mine\n")
    refused = run(repro_copy, sys.executable, "-m", "sparktrain.cli", "ci-report",
                  "--base", "HEAD", "--out", "notes.md")
    assert refused.returncode == 2 and "not a report this tool wrote" in refused.stdout
    assert (repro_copy / "notes.md").read_text() == "mine\n"
