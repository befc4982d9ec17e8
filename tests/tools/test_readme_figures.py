"""tools/readme_figures.py: the quick run records the machine and real numbers,
the blocks of README and of the pages it links (PAGES) are rewritten from a record,
and the scale-proof table has the exact form `tools/proof.py scale` prints."""
import json
import shlex
import subprocess
import sys

import pytest

from sparkhelp import HANG_GUARD_S, ROOT

sys.path.insert(0, str(ROOT))
from tools import pr_workflow  # noqa: E402
from tools import readme_figures as rf  # noqa: E402
from tools import readme_pages as rp  # noqa: E402
from tools.proof import family_table  # noqa: E402

pytestmark = pytest.mark.slow


def test_quick_run_records_machine_date_and_the_proofs_printed_table(tmp_path):
    record = tmp_path / "fig.json"
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- figures:machine -->\nold\n<!-- /figures:machine -->\n")
    done = subprocess.run([sys.executable, "tools/readme_figures.py", "--quick", "--only",
                           "scale-proof,bench", "--record", str(record), "--readme", str(readme)],
                          cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    doc = json.loads(record.read_text())
    m = doc["machine"]
    assert m["cores"] >= 1 and m["date"] and m["cpu"] and isinstance(m["simd_flags"], list)
    assert len(m["load_average"]) == 3 and doc["quick"] is True
    table = doc["figures"]["scale-proof"]["table"]
    assert table[0] == "| family  | n  | loss   | next-token acc | exact match |"
    assert [row.split("|")[1].strip() for row in table[2:]] == [
        "copy", "upper", "next", "reverse", "lookup"]
    assert doc["figures"]["bench"]["tiny"]["tokens_per_s"] > 0
    assert "old" in readme.read_text()          # --quick never rewrites the README


def test_blocks_are_rewritten_from_a_record():
    record = {"machine": {"date": "2026-01-02", "cores": 4, "usable_cores": 2, "cpu": "CPU X",
                          "arch": "x86_64", "simd_flags": ["avx2", "fma"], "python": "3.11",
                          "numpy": "2.0", "load_average": [0.1, 0.2, 0.3]},
              "figures": {"scale-proof": {"text": "| new | table |"}}}
    text = ("a\n<!-- figures:machine -->\nold line\n<!-- /figures:machine -->\nb\n"
            "<!-- figures:scale-proof -->\n| old |\n<!-- /figures:scale-proof -->\n"
            "<!-- figures:other -->\nkept\n<!-- /figures:other -->\n")
    new, done = rp.rewrite(text, rp.blocks(record))
    assert done == ["machine", "scale-proof"]
    assert "Measured 2026-01-02 on 4 cores (2 usable) of CPU X (x86_64; SIMD: avx2 fma)" in new
    assert "<!-- figures:scale-proof -->\n| new | table |\n<!-- /figures:scale-proof -->" in new
    assert "kept" in new and "old line" not in new


def test_the_readmes_scale_table_has_the_form_the_proof_prints():
    body = rp.find_block("scale-proof")
    rows = [r for r in body.splitlines() if r.startswith("|")]  # the table; then its wall time
    families = {r.split("|")[1].strip(): dict(zip(("n", "loss", "next_token_accuracy",
                                                   "exact_match"),
                                                  [float(c) for c in r.split("|")[2:6]]))
                for r in rows[2:]}
    for m in families.values():
        m["n"] = int(m["n"])
    assert family_table(families) == rows


SHOW = """\
 ─────────────────────────────────────────────────────────────────
  Experiment                   loss   perplexity   step.lr   step.seed
 ─────────────────────────────────────────────────────────────────
  workspace                  4.7562        116.3   0.1       0
  main                       4.7562        116.3   0.1       0
  ├── bb1b9b3 [handy-work]    4.158       63.943   0.05      1
  └── 2f66073 [quits-ulna]   4.2518       70.233   0.02      0
 ─────────────────────────────────────────────────────────────────
"""


def test_exp_show_rows_are_read_by_column_and_an_experiment_found_by_its_params():
    rows = rp.exp_rows(SHOW)
    assert [r["name"] for r in rows] == ["workspace", "main", "handy-work", "quits-ulna"]
    assert rows[2] == {"rev": "bb1b9b3", "name": "handy-work", "loss": "4.158",
                       "perplexity": "63.943", "step.lr": "0.05", "step.seed": "1"}
    assert rp.exp_named(rows, {"step.lr": "0.02", "step.seed": "0"})["name"] == "quits-ulna"
    with pytest.raises(SystemExit):          # the baseline rows are never picked
        rp.exp_named(rows, {"step.lr": "0.1"})


def test_a_figure_shown_in_two_places_rewrites_both_blocks_and_stable_keeps_the_machine():
    record = {"machine": {"date": "2026-01-02", "cores": 1, "usable_cores": 1, "cpu": "C",
                          "arch": "x", "simd_flags": [], "python": "3", "numpy": "2",
                          "load_average": [0, 0, 0]},
              "figures": {"grid": {"blocks": {"grid-show": "A", "grid-compare": "B"}}}}
    text = ("<!-- figures:grid-show -->\nold\n<!-- /figures:grid-show -->\n"
            "<!-- figures:grid-compare -->\nold\n<!-- /figures:grid-compare -->\n")
    new, done = rp.rewrite(text, rp.blocks(record))
    assert done == ["grid-show", "grid-compare"] and "old" not in new
    assert set(rf.STABLE) <= set(rf.FIGURES)
    assert rf.main(["--stable", "--only", "run"]) == 2


def test_the_readmes_reproducible_figures_are_in_generated_blocks():
    """The figures the run tests compare (tests/train/test_compat.py: the coder tiny
    run's losses and bpb, the scale proof's copy/upper/lookup rows) are read from
    blocks the tool writes, never from hand-typed text."""
    run = rp.find_block("coder-tiny")
    coder = rp.coder_figures(run)
    assert coder["loss_after"] and coder["loss_before"]
    assert set(coder["bpb"]) == {"model (tiny, bpe)", "in sliding windows, stride 16",
                                 "dynamic, learning as it codes", "zlib level 9",
                                 "lzma preset 9e", "PPMd, order 16", "lzma preset 9e, primed",
                                 "PPMd, order 16, primed"}
    scale = rp.scale_figures(rp.find_block("scale-proof"))
    assert {"copy", "upper", "lookup"} <= set(scale)
    assert "coder-tiny" in rf.FIGURES and " on " in run.split("\n")[0]
    # README's one line of that run is the one coder_line makes of the whole run
    lines = run.split("```\n", 1)[1].rsplit("\n```", 1)[0].splitlines()
    where = run.split("(", 1)[1].split(";", 1)[0]      # "330 s wall on CPU, ..."
    readme = (ROOT / "README.md").read_text()
    assert rp.block(readme, "coder-tiny-line") == rp.coder_line(lines, where)


def test_every_block_lives_in_one_page_of_pages_and_the_readme_stays_short():
    """The blocks move between README and the pages it links, never out of reach of the
    tool: each block a figure writes is in some page of PAGES, and only once."""
    texts = [p.read_text() for p in rp.PAGES]
    record = {"machine": {"date": "d", "cores": 1, "usable_cores": 1, "cpu": "C", "arch": "x",
                          "simd_flags": [], "python": "3", "numpy": "2", "load_average": [0]},
              "figures": {}}
    shown_by = {"grid": ("grid-show", "grid-compare", "grid-line"),
                "coder-tiny": ("coder-tiny", "coder-tiny-line"),
                "tasks": ("repro-check-line", "export-line"),
                "ci-report": ("ci-report", "ci-report-line")}
    names = set(rp.blocks(record)) | {"coder-peer"}   # the machine line; coder_compare's
    for fig in rf.FIGURES:
        names |= set(shown_by.get(fig, (fig,)))
    for name in names:
        holders = [str(p) for p, t in zip(rp.PAGES, texts) if f"<!-- figures:{name} -->" in t]
        assert len(holders) == 1, (name, holders)
    assert len(texts[0].splitlines()) <= 300


def test_a_record_rewrites_the_blocks_of_every_page(tmp_path, monkeypatch):
    pages = [tmp_path / "README.md", tmp_path / "runs.md"]
    pages[0].write_text("<!-- figures:coder-tiny-line -->\nold\n<!-- /figures:coder-tiny-line -->\n")
    pages[1].write_text("<!-- figures:coder-tiny -->\nold\n<!-- /figures:coder-tiny -->\n")
    record = {"machine": {}, "figures": {"coder-tiny": {"blocks": {
        "coder-tiny": "WHOLE", "coder-tiny-line": "LINE"}}}}
    monkeypatch.setattr(rf, "machine", lambda: {
        "date": "d", "cores": 1, "usable_cores": 1, "cpu": "C", "arch": "x", "simd_flags": [],
        "python": "3", "numpy": "2", "load_average": [0, 0, 0]})
    monkeypatch.setattr(rf, "FIGURES", {"coder-tiny": (lambda work, quick: record["figures"]
                                                       ["coder-tiny"], False)})
    assert rf.main(["--only", "coder-tiny", "--record", str(tmp_path / "r.json"),
                    "--readme", str(pages[0]), "--readme", str(pages[1])]) == 0
    assert rp.find_block("coder-tiny-line", pages) == "LINE"
    assert rp.find_block("coder-tiny", pages) == "WHOLE"


def test_the_test_figure_is_make_tests_own_run(monkeypatch, tmp_path):
    """README's `make test` line comes from running `make test` (the Makefile's pytest
    workers and options), not from a pytest command of this script's own."""
    ran = []

    def fake_run(cwd, *cmd, **kw):
        ran.append((cwd, cmd))
        return 400.0, "....\n12 passed, 3 skipped, 1 deselected in 399.12s (0:06:39)\n"
    monkeypatch.setattr(rf, "_run", fake_run)
    monkeypatch.setattr(rf, "cpu_label", lambda: "CPU X, 2 usable cores, load average 0.1")
    fig = rf.fig_tests(tmp_path, quick=False)
    assert ran == [(ROOT, ("make", "-s", "--no-print-directory", "test"))]
    assert fig["text"] == ("`make test`: 12 passed, 3 skipped, 1 deselected in 399.12s "
                           "(0:06:39) (6.7 min wall on CPU X, 2 usable cores, load average 0.1)")
    assert rf.FIGURES["tests"][0] is rf.fig_tests
    text = (ROOT / "README.md").read_text()
    assert text.count("<!-- figures:tests -->") == 1 and "passed" in rp.find_block("tests")


def test_the_tasks_figure_is_the_last_line_of_each_command(monkeypatch, tmp_path):
    """README's lines under "Check reproducibility in CI" and "Use your model elsewhere":
    the verdict of `spark repro-check` and what `spark export --to hf` says, as README
    writes the commands, in the copy `make run` leaves."""
    ran = []

    def fake_run(cwd, *cmd, **kw):
        ran.append(cmd[3:])
        return 1.0, {"repro-check": "made with: x\nrepro-check: ok: all\n",
                     "export": "wrote out/hf: a, b\n"}[cmd[3]]
    monkeypatch.setattr(rf, "_run", fake_run)
    monkeypatch.setattr(rf, "_repro_copy", lambda work: tmp_path)
    fig = rf.fig_tasks(tmp_path, quick=False)
    assert fig["blocks"] == {"repro-check-line": "```\nrepro-check: ok: all\n```",
                             "export-line": "```\nwrote out/hf: a, b\n```"}
    readme = (ROOT / "README.md").read_text()
    assert ran[1] == tuple(next(ln for ln in readme.splitlines()
                                if ln.startswith("spark export --to hf")).split()[1:])
    assert "tasks" in rf.STABLE


def test_the_own_data_figure_runs_the_readmes_lines(monkeypatch, tmp_path):
    """README's "Train on your own data": the figure trains and evaluates with the
    lines README shows (the flags the tool adds: --device cpu), and shows the two bpb
    lines `spark eval` prints, verbatim."""
    ran = []

    def fake_run(cwd, *cmd, **kw):
        ran.append(cmd[3:])
        return 42.0, ("eval w: the held-out split (9 bytes, 3 tokens)\n  bpb 3.3809  (sliding, "
                      "stride 16: 3.3604)\n  zlib-9 3.5147  lzma-9e 3.5595\n  loss 1  perplexity 2\n")
    monkeypatch.setattr(rf, "_run", fake_run)
    monkeypatch.setattr(rf, "copy_project", lambda root, dest: dest)
    monkeypatch.setattr(rf, "cpu_label", lambda: "CPU X")
    fig = rf.fig_own_data(tmp_path, quick=False)
    block = (ROOT / "README.md").read_text().split("## Train on your own data\n", 1)[1]
    lines = [shlex.split(ln.split("#")[0])[1:] for ln in block.split("```sh\n", 1)[1]
             .split("```", 1)[0].splitlines() if ln.startswith("spark ")]
    assert [list(c) for c in ran] == [lines[0] + ["--device", "cpu"], lines[1]]
    assert fig["lines"] == ["  bpb 3.3809  (sliding, stride 16: 3.3604)",
                            "  zlib-9 3.5147  lzma-9e 3.5595"]
    assert fig["text"].startswith("Trained in 42 s on CPU X; `spark eval` printed:")


REPORT = """<!-- spark ci-report -->
## Spark Train: this branch against `origin/main` (abc1234)

**Reproducibility** ✅ `repro-check: ok: all`

### Metrics (job `job-dry-001`)

| metric | origin/main | this branch | change |
| --- | ---: | ---: | ---: |
| training loss, last pass | 2.6 | 2.2 | -0.4 |
| held-out loss | 4.1 | 4.3 | +0.2 |
| perplexity | 64.7 | 76.1 | +11.4 |

```mermaid
xychart-beta
```
"""


def test_the_ci_report_figure_is_the_workflows_report_whole_and_its_head(monkeypatch, tmp_path):
    """docs/ci.md's block is the report gh was given, verbatim; README's is its verdict
    line and the metrics table's header and first two rows; the report comes from the
    workflow's own steps on the copy `make run` leaves (tools/pr_workflow.py)."""
    ran = []

    def fake_workflow(fresh, root):
        ran.append((fresh, root))
        return pr_workflow.PullRequestRun(tmp_path, ["Set up"], [], REPORT)
    monkeypatch.setattr(rf, "_repro_copy", lambda work: tmp_path / "run")
    monkeypatch.setattr(rf, "run_workflow", fake_workflow)
    fig = rf.fig_ci_report(tmp_path, quick=False)
    assert ran == [(tmp_path / "run", tmp_path / "ci-report")]
    assert fig["blocks"]["ci-report"] == "````markdown\n" + REPORT.rstrip("\n") + "\n````"
    assert fig["blocks"]["ci-report-line"].splitlines() == [
        "**Reproducibility** ✅ `repro-check: ok: all`",
        "| metric | origin/main | this branch | change |", "| --- | ---: | ---: | ---: |",
        "| training loss, last pass | 2.6 | 2.2 | -0.4 |", "| held-out loss | 4.1 | 4.3 | +0.2 |"]
    assert rf.FIGURES["ci-report"] == (rf.fig_ci_report, False), "slow: never in --quick"
    with pytest.raises(SystemExit, match="no verdict line"):
        rp.ci_report_blocks(REPORT.replace("**Reproducibility**", "Reproducibility"))


def test_the_pages_show_the_report_the_figure_wrote():
    """README's head of the report is the head ci_report_blocks makes of docs/ci.md's
    whole report: both blocks come from one run, neither typed by hand."""
    whole = rp.find_block("ci-report")
    assert whole.startswith("````markdown\n<!-- spark ci-report -->\n"), whole[:80]
    body = whole.split("\n", 1)[1].rsplit("\n````", 1)[0]
    readme = (ROOT / "README.md").read_text()
    assert rp.block(readme, "ci-report-line") == rp.ci_report_blocks(body)["ci-report-line"]
    assert "| `step.lr` | `0.03` | `0.05` |" in body
