"""README's quick blocks run AS WRITTEN in a fresh copy of the project, in order, and
every figure they show that a run must reproduce compared with what the run prints.

Nothing expected is typed here: the figures are read from README.md's generated
blocks (`tools/readme_figures.py --stable` writes them from a real run), so when
the default job's bytes move (another BLAS kernel, a re-recorded dvc.lock) this
fails until that command is rerun. Placeholders are filled the way README says:
`<exp>` is the experiment of `dvc exp show` whose params the block's comment names.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from sparkhelp import HANG_GUARD_S

from .conftest import REPO, VENV_BIN, clone, git, ran_stages, tool_env

sys.path.insert(0, str(REPO))
from tools.readme_figures import exp_rows as parse_exp_show  # noqa: E402

pytestmark = pytest.mark.e2e

README = (REPO / "README.md").read_text()
COLUMNS = "200"   # the width tools/readme_figures.py prints the tables at
RULE = "\u2500\u2500\u2500"


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def sh_lines(text: str) -> list[str]:
    """The command lines of the first ```sh block of `text`."""
    body = text.split("```sh\n", 1)[1].split("\n```", 1)[0]
    return [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def figure(name: str) -> list[str]:
    """A generated block's lines, without its code fence."""
    body = README.split(f"<!-- figures:{name} -->\n", 1)[1].split(f"\n<!-- /figures:{name} -->")[0]
    return [ln for ln in body.splitlines() if not ln.startswith("```")]


def commands(lines: list[str]) -> list[tuple[str, list[str]]]:
    """[(command after `$ `, the output lines shown under it)]."""
    found = []
    for ln in lines:
        if ln.startswith("$ "):
            found.append((ln[2:], []))
        elif found:
            found[-1][1].append(ln)
    return found


def reset_line() -> str:
    return re.search(r"`(git checkout [^`]+)`", section("Change a parameter")).group(1)


def shell(repo, line: str) -> str:
    """One README line in the copy, as a user with the venv activated runs it."""
    line = line.replace(".venv/bin/", f"{VENV_BIN}/")
    # make run: the venv exists already (the copy has none; it must not install one)
    line = re.sub(r"^make run\b", f"make run STAMP= BIN={VENV_BIN}", line)
    done = subprocess.run(["bash", "-c", line], cwd=repo, text=True, timeout=HANG_GUARD_S,
                          env=tool_env(repo, {"COLUMNS": COLUMNS}),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert done.returncode == 0, f"{line!r} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def stdout_of(repo, line: str) -> str:
    done = subprocess.run(["bash", "-c", line], cwd=repo, text=True, timeout=HANG_GUARD_S,
                          env=tool_env(repo, {"COLUMNS": COLUMNS}), capture_output=True)
    assert done.returncode == 0, f"{line!r}:\n{done.stderr}"
    return done.stdout


def assert_clean(repo) -> None:
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert "up to date" in shell(repo, "dvc status"), "the reset left work for dvc repro"


def exp_rows(lines) -> dict[tuple, dict]:
    """dvc exp show's rows keyed by their (step.lr, step.seed) cells."""
    rows = parse_exp_show("\n".join(lines))
    return {(r.get("step.lr"), r.get("step.seed"), r["rev"] == r["name"] and r["name"]): r
            for r in rows}


def normal(lines, names: dict[str, str] | None = None) -> list[str]:
    """Lines with runs of spaces folded (column widths follow the names' lengths),
    rules and blank lines dropped, README's names and revs swapped for the run's."""
    names = names or {}

    def swap(tok: str) -> str:
        if tok in names:
            return names[tok]
        for old, new in names.items():
            if "-" in old:   # a name (never a rev) inside a token: "[name]", a legend
                tok = tok.replace(old, new)
        return tok
    return [" ".join(swap(t) for t in ln.split()) for ln in lines
            if ln.strip() and RULE not in ln]


@pytest.fixture
def copy(fresh_repro, tmp_path):
    """A fresh clone after its first `dvc repro`, dvc.lock committed as a release has it
    (on a branch whose lock is stale the first repro re-records it)."""
    repo = clone(fresh_repro[0], tmp_path / "repo")
    git(repo, "commit", "-q", "--allow-empty", "-am", "dvc.lock as the run records it")
    return repo


def test_readme_quick_blocks_run_as_written_and_show_what_runs_give(copy):
    # "Run it": make run's summary is the README's, but for its speed line
    out = ""
    for line in sh_lines(section("Run it")):
        if line.startswith("source "):      # the test's PATH has the venv first already
            continue
        out += shell(copy, line)
    shown = [ln for ln in figure("run") if not ln.lstrip().startswith("speed")]
    assert shown and "weights sha256" in "\n".join(shown)
    for ln in shown:
        assert ln in out.splitlines(), f"README shows {ln!r}; make run printed:\n{out}"

    # "Change a parameter": the two repros do what their comments say; the reset works
    first, second = [ln for ln in sh_lines(section("Change a parameter"))
                     if ln.startswith("dvc repro")]
    assert sh_lines(section("Change a parameter"))[0].startswith("sed -i")
    shell(copy, sh_lines(section("Change a parameter"))[0])
    ran = ran_stages(shell(copy, first))
    assert {"step", "eval"} <= ran and not {"decode-bc", "train-status"} & ran, ran
    assert ran_stages(shell(copy, second)) == set()
    shell(copy, reset_line())
    assert_clean(copy)

    # "Every core of one machine": the experiment lands in the workspace; the reset undoes it
    exp = sh_lines(section("Every core of one machine"))[0]
    assert exp.startswith("dvc exp run -S step.shards=2")
    shell(copy, exp)
    ckpt = json.loads((copy / "out/train/job-dry-001/checkpoint.json").read_text())
    assert ckpt["shards"] == 2
    shell(copy, reset_line())
    assert_clean(copy)

    # "Sweep and compare": the grid as written, then each shown command and its output
    for line in sh_lines(section("Sweep and compare")):
        shell(copy, line)
    shown = commands(figure("grid-show")) + commands(figure("grid-compare"))
    show_cmd, show_lines = shown[0]
    run_show = stdout_of(copy, show_cmd).splitlines()
    want, got = exp_rows(show_lines), exp_rows(run_show)
    assert sorted(want, key=str) == sorted(got, key=str), (show_lines, run_show)
    names = {}
    for key, row in want.items():
        if row["rev"] != row["name"]:
            names[row["rev"]], names[row["name"]] = got[key]["rev"], got[key]["name"]
    metrics = [c for c in want[next(iter(want))] if c not in ("rev", "name")]
    for key in want:
        assert {c: want[key].get(c) for c in metrics} == {c: got[key].get(c) for c in metrics}
    assert sorted(normal(show_lines, names)) == sorted(normal(run_show))
    # README: <exp> is the experiment whose params the first diff's comment names
    named = next(re.search(r"# <exp> = \S+ here: (.+)$", c) for c, _ in shown if "<exp>" in c)
    params = dict(p.split(" ") for p in named.group(1).split(", "))
    pick = [r["name"] for r in got.values() if r["rev"] != r["name"]
            and all(r.get(k) == v for k, v in params.items())]
    assert len(pick) == 1, params
    for cmd, lines in shown[1:]:
        cmd = cmd.split("#")[0].replace("<exp>", pick[0])
        assert normal(stdout_of(copy, cmd).splitlines()) == normal(lines, names), cmd

    # "Sweeping on a cluster" starts over: its first line drops the grid's experiments
    # and the queue's finished tasks (`dvc exp remove` alone leaves them in the status)
    before = shell(copy, "dvc queue status")
    again = sh_lines(section("Sweeping on a cluster"))[0].split("#")[0]
    assert "dvc exp remove -A" in again and "dvc queue remove --all" in again, again
    shell(copy, again)
    status = shell(copy, "dvc queue status")
    assert "No experiment tasks in the queue." in status, (before, status)
    assert "Success" not in status, (before, status)
