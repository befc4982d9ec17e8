"""Sweeps a person can read, through the real dvc: two experiments on the tiny job,
then what `dvc exp show`, `dvc metrics diff`, `dvc params diff`, `dvc plots diff`
and `spark compare` make of them."""
from __future__ import annotations

import json
import struct

import pytest

from sparktrain.eval.headline import HEADLINE_KEYS

from .conftest import clone, dvc, dvc_json, git, run

pytestmark = pytest.mark.e2e

JOB = "out/train/job-dry-001"
METRIC = f"{JOB}/eval.json"
LRS = (0.05, 0.02)


@pytest.fixture(scope="module")
def swept(fresh_repro, tmp_path_factory):
    """(repo, {lr: experiment name}): the fresh repro committed, then one
    experiment per learning rate. Tests only read it."""
    repo = clone(fresh_repro[0], tmp_path_factory.mktemp("swept") / "repo")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "lock after repro")
    names = {}
    for lr in LRS:
        done = dvc(repo, "exp", "run", "-S", f"step.lr={lr}")
        names[lr] = done.stdout.split("Ran experiment(s): ")[1].split()[0]
    return repo, names


def _experiments(shown: list) -> list[dict]:
    return [rev for base in shown for exp in base.get("experiments") or []
            for rev in exp.get("revs") or [] if rev.get("data")]


def _md_header(text: str) -> list[str]:
    return [c.strip() for c in text.splitlines()[0].strip().strip("|").split("|")]


def test_the_metric_is_the_few_flat_headline_numbers(swept):
    repo, names = swept
    exps = _experiments(dvc_json(repo, "exp", "show"))
    assert sorted(e["name"] for e in exps) == sorted(names.values())
    for exp in exps:
        metrics = exp["data"]["metrics"]
        assert list(metrics) == [METRIC]          # eval_detail.json is no metric
        values = metrics[METRIC]["data"]
        assert set(values) == {"loss", "perplexity", "next_token_accuracy", "exact_match",
                               "copy_recall"}
        assert set(values) <= set(HEADLINE_KEYS)
        assert all(v is None or isinstance(v, (int, float)) for v in values.values())
    detail = json.loads((repo / JOB / "eval_detail.json").read_text())
    assert {"families", "samples", "n", "weights_sha256", "data"} <= set(detail)
    assert not set(detail) & set(HEADLINE_KEYS)


def test_exp_show_is_readable_with_default_options(swept):
    """Without a terminal dvc prints the table as it feeds its pager (`less -S`
    in a terminal): at full width, cut only past 1024 columns. The 37-column
    metric filled those, so every metric and param became `…`."""
    repo, names = swept
    text = dvc(repo, "exp", "show").stdout
    assert "…" not in text, text[:2000]
    header = next(ln for ln in text.splitlines() if "Experiment" in ln)
    # what an 80-column terminal shows first: the experiment, then the metrics
    assert header.split()[:4] == ["Experiment", "Created", "copy_recall", "exact_match"]
    assert "step.lr" in header
    for lr, name in names.items():
        row = next(ln for ln in text.splitlines() if f"[{name}]" in ln)
        assert f" {lr} " in row, row

    md = dvc(repo, "exp", "show", "--md").stdout
    columns = _md_header(md)
    assert columns[2:7] == ["copy_recall", "exact_match", "loss", "next_token_accuracy",
                            "perplexity"], columns
    assert not [c for c in columns if c.startswith(("families", "samples", "n_"))]

    changed = _md_header(dvc(repo, "exp", "show", "--md", "--only-changed").stdout)
    # the metrics, the param that differs, and the two model files that moved with it
    assert "step.lr" in changed and "loss" in changed and len(changed) <= 10, changed
    assert not [c for c in changed if c.startswith("step.") and c != "step.lr"], changed


def test_metrics_and_params_diff_against_main_are_short(swept):
    repo, names = swept
    exp = names[LRS[0]]
    metrics = dvc_json(repo, "metrics", "diff", "main", exp)
    assert set(metrics[METRIC]) <= set(HEADLINE_KEYS)
    assert "loss" in metrics[METRIC] and metrics[METRIC]["loss"]["diff"] != 0
    params = dvc_json(repo, "params", "diff", "main", exp)
    assert list(params) == ["params.yaml"] and list(params["params.yaml"]) == ["step.lr"]
    assert params["params.yaml"]["step.lr"]["new"] == LRS[0]
    table = dvc(repo, "metrics", "diff", "main", exp).stdout.strip().splitlines()
    # a header and one row per headline number that moved (the old metric: up to 37)
    assert 2 <= len(table) <= 1 + len(HEADLINE_KEYS), table
    assert all(ln.startswith(METRIC) for ln in table[1:]), table


def test_plots_diff_json_gives_each_experiments_curve(swept, tmp_path):
    repo, names = swept
    shown = dvc_json(repo, "plots", "diff", "main", *names.values(),
                     "-o", str(tmp_path / "plots"))
    assert not shown.get("errors"), shown["errors"]
    [plot] = shown["data"][f"{JOB}/checkpoint.json"]
    revs = {p["rev"] for p in plot["content"]["data"]["values"]}
    assert revs == {"main", *names.values()}


def test_spark_compare_draws_and_tabulates_every_experiment(swept, tmp_path):
    repo, names = swept
    png = tmp_path / "sweep.png"
    done = run(repo, "spark", "compare", "--json", "-o", str(png))
    assert done.returncode == 0, done.stdout
    doc = json.loads(done.stdout)
    assert doc["changed_params"] == ["step.lr"]
    by_name = {e["name"]: e for e in doc["experiments"]}
    assert set(by_name) == set(names.values())
    for lr, name in names.items():
        exp = by_name[name]
        assert exp["label"] == f"lr={lr}" and exp["params"] == {"step.lr": lr}
        # the curve is the experiment's own committed checkpoint, not the workspace's
        [metric] = [e["data"]["metrics"][METRIC]["data"]
                    for e in _experiments(dvc_json(repo, "exp", "show")) if e["name"] == name]
        assert exp["metrics"] == metric
        assert [p["outer"] for p in exp["loss_curve"]] == [0, 1, 2, 3, 4]
        # the step logs the held-out loss after every pass; the last is eval's loss
        assert [p["outer"] for p in exp["heldout"]] == [0, 1, 2, 3, 4]
        assert exp["heldout"][-1]["loss"] == pytest.approx(metric["loss"], rel=1e-4)
    assert by_name[names[0.05]]["loss_curve"] != by_name[names[0.02]]["loss_curve"]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (800, 500)

    table = run(repo, "spark", "compare", names[0.02], "-o", str(tmp_path / "one.png"))
    assert table.returncode == 0, table.stdout
    assert f"{names[0.02]}  0.02" in table.stdout and names[0.05] not in table.stdout
    assert (tmp_path / "one.png").read_bytes() != data


def _one_line_error(done, needle):
    assert done.returncode == 2, done.stdout
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in done.stdout, lines


def test_spark_compare_bad_input(swept, fresh_repro, tmp_path):
    repo, names = swept
    _one_line_error(run(repo, "spark", "compare", "no-such-exp", "-o", str(tmp_path / "a.png")),
                    "no experiment named 'no-such-exp'")
    _one_line_error(run(fresh_repro[0], "spark", "compare", "-o", str(tmp_path / "b.png")),
                    "no experiments yet")
    _one_line_error(run(tmp_path, "spark", "compare", "-o", str(tmp_path / "c.png")),
                    "not a git repository")  # experiments live in git refs
    assert not list(tmp_path.glob("*.png"))


def test_spark_status_shows_the_metric_and_its_detail(fresh_repro):
    repo, _ = fresh_repro
    state = json.loads(run(repo, "spark", "status", "job-dry-001").stdout)
    assert set(state["eval"]) == {"loss", "perplexity", "next_token_accuracy", "exact_match",
                                  "copy_recall"}
    assert {"families", "samples", "n"} <= set(state["eval_detail"])
