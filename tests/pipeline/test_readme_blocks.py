"""README's quick blocks (and docs/experiments.md's, the walk-throughs README links)
run AS WRITTEN in a fresh copy of the project, in order, and
every figure they show that a run must reproduce compared with what the run prints;
then the 2x2 grid they leave, read the ways a person reads a sweep (`dvc exp show`,
`dvc metrics diff`, `dvc params diff`, `dvc plots diff`, `spark compare`) and shared
as "Share results" writes it. One grid for all: each of its experiments is a whole
`dvc exp run`, the suite's costliest step.

Nothing expected is typed here: the figures are read from the pages' generated
blocks (`tools/readme_figures.py --stable` writes them from a real run), so when
the default job's bytes move (another BLAS kernel, a re-recorded dvc.lock) this
fails until that command is rerun. Placeholders are filled the way README says:
`<exp>` is the experiment of `dvc exp show` whose params the block's comment names.
"""
from __future__ import annotations

import json
import re
import struct
import subprocess
import sys

import pytest
import yaml

from sparkhelp import HANG_GUARD_S

from sparktrain.core.metric_keys import HEADLINE_KEYS

from .conftest import (EVAL_METRICS, NUMERIC_METRICS, REPO, VENV_BIN, clone, dvc, dvc_json,
                       exp_revs, git, lock_outs, ran_stages, run, tool_env)

sys.path.insert(0, str(REPO))
from tools.readme_pages import exp_rows as parse_exp_show, find_block  # noqa: E402

pytestmark = pytest.mark.e2e

README = (REPO / "README.md").read_text()
EXPERIMENTS = (REPO / "docs" / "experiments.md").read_text()
COLUMNS = "200"   # the width tools/readme_figures.py prints the tables at
RULE = "\u2500\u2500\u2500"


def section(title: str) -> str:
    """A `## title` section of README, else of docs/experiments.md."""
    page = README if f"\n## {title}\n" in README else EXPERIMENTS
    return page.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def sh_lines(text: str) -> list[str]:
    """The command lines of the first ```sh block of `text`."""
    body = text.split("```sh\n", 1)[1].split("\n```", 1)[0]
    return [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def figure(name: str) -> list[str]:
    """A generated block's lines (README's, else docs/experiments.md's), without its
    code fence."""
    body = find_block(name)
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
    # make run: the venv exists already (the copy has none; it must not install one),
    # and the plots template is not this test's (test_plots_page.py's; npm would fetch it)
    line = re.sub(r"^make (run|repro-check)\b",
                  lambda m: f"make {m.group(1)} STAMP= PLOTS_PAGE= BIN={VENV_BIN}", line)
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


def state(repo) -> tuple[str, str]:
    """(git's list of changed tracked files, `dvc status`): what a reset must leave clean."""
    return git(repo, "status", "--porcelain", "--untracked-files=no"), shell(repo, "dvc status")


@pytest.fixture(scope="module")
def readme_run(fresh_repro, tmp_path_factory):
    """(repo, what each step printed): a fresh clone after its first `dvc repro`, dvc.lock
    committed as a release has it (on a branch whose lock is stale the first repro
    re-records it), then README's quick blocks run in it as written, in order, through
    "Sweep and compare"'s 2x2 grid. Tests read the repo, or change a `cp -a` of it."""
    repo = clone(fresh_repro[0], tmp_path_factory.mktemp("readme") / "repo")
    git(repo, "commit", "-q", "--allow-empty", "-am", "dvc.lock as the run records it")
    got = {}
    # "Run it" (the test's PATH has the venv first already: no `source`)
    got["run"] = "".join(shell(repo, line) for line in sh_lines(section("Run it"))
                         if not line.startswith("source "))
    # "Change a parameter": the edit, the two repros, the reset
    change = sh_lines(section("Change a parameter"))
    got["edit"] = change[0]
    shell(repo, change[0])
    got["repros"] = [shell(repo, line) for line in change if line.startswith("dvc repro")]
    shell(repo, reset_line())
    got["after reset"] = state(repo)
    # "Every core of one machine": the experiment lands in the workspace; the reset undoes it
    got["exp"] = sh_lines(section("Every core of one machine"))[0]
    shell(repo, got["exp"])
    got["exp checkpoint"] = json.loads(
        (repo / "out/train/job-dry-001/checkpoint.json").read_text())
    shell(repo, reset_line())
    got["after exp reset"] = state(repo)
    # README's "Sweep, compare and tune": the grid as written (docs/experiments.md's
    # "Sweep and compare" shows the same lines, and the outputs they give)
    grid = sh_lines(section("Sweep, compare and tune"))
    assert grid == sh_lines(section("Sweep and compare")), "README and experiments.md differ"
    for line in grid:
        shell(repo, line)
    return repo, got


def test_run_it_prints_the_summary_readme_shows(readme_run):
    # make run's summary is the README's, but for its speed line
    out = readme_run[1]["run"]
    shown = [ln for ln in figure("run") if not ln.lstrip().startswith("speed")]
    assert shown and "weights sha256" in "\n".join(shown)
    for ln in shown:
        assert ln in out.splitlines(), f"README shows {ln!r}; make run printed:\n{out}"


def test_change_a_parameter_and_every_core_do_what_their_comments_say(readme_run):
    got = readme_run[1]
    # the two repros do what their comments say; the reset works
    assert got["edit"].startswith("sed -i")
    first, second = got["repros"]
    ran = ran_stages(first)
    assert {"step", "eval"} <= ran and not {"decode-bc", "train-status"} & ran, ran
    assert ran_stages(second) == set()
    changed, status = got["after reset"]
    assert changed == "" and "up to date" in status, "the reset left work for dvc repro"
    # the shards experiment landed in the workspace; the reset undid it
    assert got["exp"].startswith("dvc exp run -S step.shards=2")
    assert got["exp checkpoint"]["shards"] == 2
    changed, status = got["after exp reset"]
    assert changed == "" and "up to date" in status, "the reset left work for dvc repro"


def test_sweep_and_compare_shows_what_the_grid_gives(readme_run):
    # each shown command and its output
    copy = readme_run[0]
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
    # README's one row of the table: the header and a row of this run's table
    header, row = normal(figure("grid-line"), names)
    assert header in normal(run_show) and row in normal(run_show), (header, row, run_show)


def test_sweeping_on_a_cluster_starts_over(readme_run, tmp_path):
    # its first line drops the grid's experiments and the queue's finished tasks
    # (`dvc exp remove` alone leaves them in the status)
    copy = clone(readme_run[0], tmp_path / "repo")
    before = shell(copy, "dvc queue status")
    assert "Success" in before, before
    again = sh_lines(section("Sweeping on a cluster"))[0].split("#")[0]
    assert "dvc exp remove -A" in again and "dvc queue remove --all" in again, again
    shell(copy, again)
    status = shell(copy, "dvc queue status")
    assert "No experiment tasks in the queue." in status, (before, status)
    assert "Success" not in status, (before, status)


def test_repro_check_and_export_print_what_readme_shows(readme_run, tmp_path):
    """README's "Check reproducibility in CI" and "Use your model elsewhere" blocks, as
    written, in a copy of the project they start from: each prints the line README shows
    under it (tools/readme_figures.py's `tasks` figure)."""
    copy = clone(readme_run[0], tmp_path / "repo")
    for title, name in (("Check reproducibility in CI", "repro-check-line"),
                        ("Use your model elsewhere", "export-line")):
        out = "".join(shell(copy, line) for line in sh_lines(section(title)))
        [shown] = figure(name)
        assert shown in out.splitlines(), (title, shown, out)


# --- the grid, read ------------------------------------------------------------------

JOB = "out/train/job-dry-001"
METRIC = f"{JOB}/eval.json"

@pytest.fixture(scope="module")
def grid(readme_run):
    """(repo, {(step.lr, step.seed): experiment name}, the experiments as `dvc exp show
    --json` lists them): the grid's four experiments, read once for every reader."""
    repo = readme_run[0]
    exps = exp_revs(dvc_json(repo, "exp", "show"))
    names = {}
    for exp in exps:
        step = exp["data"]["params"]["params.yaml"]["data"]["step"]
        names[(step["lr"], step["seed"])] = exp["name"]
    assert sorted(names) == [(0.02, 0), (0.02, 1), (0.05, 0), (0.05, 1)], names
    return repo, names, exps


QUEUE_COLUMNS = ("State", "Executor")   # DVC's, for the experiments its queue ran


def _md_header(text: str) -> list[str]:
    return [c.strip() for c in text.splitlines()[0].strip().strip("|").split("|")]


def test_the_metric_is_the_few_flat_headline_numbers(grid):
    repo, names, exps = grid
    assert sorted(e["name"] for e in exps) == sorted(names.values())
    for exp in exps:
        metrics = exp["data"]["metrics"]
        assert list(metrics) == [METRIC]          # eval_detail.json is no metric
        values = metrics[METRIC]["data"]
        assert set(values) == set(EVAL_METRICS)
        assert set(values) <= set(HEADLINE_KEYS)
        assert all(v is None or isinstance(v, (int, float)) for v in values.values())
    detail = json.loads((repo / JOB / "eval_detail.json").read_text())
    assert {"families", "samples", "n", "weights_sha256", "data"} <= set(detail)
    assert not set(detail) & set(HEADLINE_KEYS)


def test_exp_show_is_readable_with_default_options(grid):
    """Without a terminal dvc prints the table as it feeds its pager (`less -S`
    in a terminal): at full width, cut only past 1024 columns. The 37-column
    metric filled those, so every metric and param became `…`."""
    repo, names, _ = grid
    text = dvc(repo, "exp", "show").stdout
    assert "…" not in text, text[:2000]
    header = next(ln for ln in text.splitlines() if "Experiment" in ln)
    # what an 80-column terminal shows first: the experiment, then the metrics
    assert [c for c in header.split() if c not in QUEUE_COLUMNS][:4] == [
        "Experiment", "Created", "copy_recall", "exact_match"], header
    assert "step.lr" in header
    for (lr, _), name in names.items():
        row = next(ln for ln in text.splitlines() if f"[{name}]" in ln)
        assert f" {lr} " in row, row

    md = dvc(repo, "exp", "show", "--md").stdout
    columns = [c for c in _md_header(md) if c not in QUEUE_COLUMNS]
    assert columns[2:7] == ["copy_recall", "exact_match", "loss", "next_token_accuracy",
                            "perplexity"], columns
    assert not [c for c in columns if c.startswith(("families", "samples", "n_"))]

    changed = [c for c in _md_header(dvc(repo, "exp", "show", "--md", "--only-changed").stdout)
               if c not in QUEUE_COLUMNS]
    # the metrics, the params that differ, and the two model files that moved with them
    assert {"step.lr", "step.seed", "loss"} <= set(changed) and len(changed) <= 11, changed
    assert not [c for c in changed if c.startswith("step.")
                and c not in ("step.lr", "step.seed")], changed


def test_metrics_and_params_diff_against_main_are_short(grid):
    repo, names, _ = grid
    exp = names[(0.05, 0)]     # main's seed: only the lr differs
    metrics = dvc_json(repo, "metrics", "diff", "main", exp)
    assert set(metrics[METRIC]) <= set(HEADLINE_KEYS)
    assert "loss" in metrics[METRIC] and metrics[METRIC]["loss"]["diff"] != 0
    params = dvc_json(repo, "params", "diff", "main", exp)
    assert list(params) == ["params.yaml"] and list(params["params.yaml"]) == ["step.lr"]
    assert params["params.yaml"]["step.lr"]["new"] == 0.05
    table = dvc(repo, "metrics", "diff", "main", exp).stdout.strip().splitlines()
    # a header and one row per headline number that moved (the old metric: up to 37)
    assert 2 <= len(table) <= 1 + len(HEADLINE_KEYS), table
    assert all(ln.startswith(METRIC) for ln in table[1:]), table


def test_plots_diff_json_gives_each_experiments_curve(grid, tmp_path):
    repo, names, _ = grid
    shown = dvc_json(repo, "plots", "diff", "main", *names.values(),
                     "-o", str(tmp_path / "plots"))
    assert not shown.get("errors"), shown["errors"]
    [plot] = shown["data"][f"{JOB}/checkpoint.json"]
    revs = {p["rev"] for p in plot["content"]["data"]["values"]}
    assert revs == {"main", *names.values()}


def test_spark_compare_draws_and_tabulates_every_experiment(grid, tmp_path):
    repo, names, shown = grid
    png = tmp_path / "sweep.png"
    done = run(repo, "spark", "compare", "--json", "-o", str(png))
    assert done.returncode == 0, done.stdout
    doc = json.loads(done.stdout)
    assert doc["changed_params"] == ["step.lr", "step.seed"]
    by_name = {e["name"]: e for e in doc["experiments"]}
    assert set(by_name) == set(names.values())
    for (lr, seed), name in names.items():
        exp = by_name[name]
        assert exp["label"] == f"lr={lr} seed={seed}", exp["label"]
        assert exp["params"] == {"step.lr": lr, "step.seed": seed}
        # the curve is the experiment's own committed checkpoint, not the workspace's
        [metric] = [e["data"]["metrics"][METRIC]["data"] for e in shown if e["name"] == name]
        assert exp["metrics"] == metric
        assert [p["outer"] for p in exp["loss_curve"]] == [0, 1, 2, 3, 4]
        # the step logs the held-out loss after every pass; the last is eval's loss
        assert [p["outer"] for p in exp["heldout"]] == [0, 1, 2, 3, 4]
        assert exp["heldout"][-1]["loss"] == pytest.approx(metric["loss"], rel=1e-4)
    assert len({json.dumps(e["loss_curve"]) for e in by_name.values()}) == 4
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (800, 500)

    # --where keeps the runs at main's seed: only the lr differs among them
    where = run(repo, "spark", "compare", "--json", "--where", "step.seed=0",
                "-o", str(tmp_path / "where.png"))
    assert where.returncode == 0, where.stdout
    picked = json.loads(where.stdout)
    assert picked["changed_params"] == ["step.lr"]
    assert {e["name"]: e["label"] for e in picked["experiments"]} == {
        names[(lr, 0)]: f"lr={lr}" for lr in (0.02, 0.05)}

    one = names[(0.02, 0)]
    table = run(repo, "spark", "compare", one, "-o", str(tmp_path / "one.png"))
    assert table.returncode == 0, table.stdout
    assert f"{one}  0.02" in table.stdout and names[(0.05, 0)] not in table.stdout
    assert (tmp_path / "one.png").read_bytes() != data


def _one_line_error(done, needle):
    assert done.returncode == 2, done.stdout
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in done.stdout, lines


def test_spark_compare_bad_input(grid, fresh_repro, tmp_path):
    repo = grid[0]
    _one_line_error(run(repo, "spark", "compare", "no-such-exp", "-o", str(tmp_path / "a.png")),
                    "no experiment named 'no-such-exp'")
    _one_line_error(run(fresh_repro[0], "spark", "compare", "-o", str(tmp_path / "b.png")),
                    "no experiments yet")
    _one_line_error(run(tmp_path, "spark", "compare", "-o", str(tmp_path / "c.png")),
                    "not a git repository")  # experiments live in git refs
    assert not list(tmp_path.glob("*.png"))


# --- the grid, shared --------------------------------------------------------------------

def share_block() -> str:
    """docs/experiments.md's "Share results" shell block, as a user would paste it."""
    return section("Share results").split("```sh\n", 1)[1].split("```", 1)[0]


def test_share_results_as_the_readme_writes_it(grid, tmp_path):
    """The block run as written in a copy of the project that ran the grid, its own bare
    repo as origin and a folder as the DVC remote: a second clone with every output
    pulled (none in git), clean, nothing to run, and the experiment's metrics in the
    block's `dvc exp show`. (It is also the push-then-pull check: `dvc push`, a `git
    clone`, `dvc pull` and a `dvc repro` that runs nothing.)"""
    repo = clone(grid[0], tmp_path / "repo")
    exp = grid[1][(0.05, 0)]
    origin, store = tmp_path / "origin.git", tmp_path / "store"
    block = share_block()
    for placeholder in ("/path/to/shared/dir", "/path/to/origin.git", "<exp>"):
        assert placeholder in block, placeholder
    script = (block.replace("/path/to/shared/dir", str(store))
              .replace("/path/to/origin.git", str(origin)).replace("<exp>", exp))
    done = run(repo, "bash", "-e", "-c", script)
    assert done.returncode == 0, done.stdout
    other = repo / "spark-train"
    assert (other / ".dvc" / "config").read_text().count(str(store)) == 1
    lock = yaml.safe_load((other / "dvc.lock").read_text())
    for path in lock_outs(lock):
        assert (other / path).exists(), f"{path} not pulled"
    assert dvc(other, "status", "-q", check=False).returncode == 0
    # the outputs came from the DVC remote, not git; nothing runs or is restored from a cache
    assert git(other, "ls-files", "out").strip() == ""
    again = dvc(other, "repro")
    assert ran_stages(again.stdout) == set(), again.stdout
    assert "is cached" not in again.stdout
    [show] = [line.split("#")[0].split()[1:] for line in block.splitlines()
              if line.startswith("dvc exp show")]
    assert "--all-commits" not in show and "-A" not in show, show
    shown = dvc_json(other, *show)
    [data] = [rev["data"] for rev in exp_revs(shown) if rev.get("name") == exp] or [shown]
    metrics = data["metrics"][METRIC]["data"]
    for name in NUMERIC_METRICS:
        assert isinstance(metrics[name], (int, float)), (name, metrics)
