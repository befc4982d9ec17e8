"""The page `dvc plots show` writes draws offline: .dvc/config names the template
tools/plots_page.py builds (`make setup`), with the Vega libraries inside it.

The browser tests open the page in Debian's chromium (`make test-browser` installs it;
without it they skip) with every host name unresolvable and a dead proxy, then count
the marks each panel drew in the DOM after the render. DVC's own page, opened the
same way, draws nothing: the check can fail."""
from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from .conftest import REPO, clone, dvc

pytestmark = pytest.mark.e2e

TEMPLATE = "build/dvc-plots.html"   # .dvc/config's plots.html_template, from the repo root
JOB_METRICS = "out_train_job-dry-001_dvclive_plots_metrics_"
DRAWN = ("out_train_job-dry-001_checkpoint_json", JOB_METRICS + "heldout_loss_tsv")
NO_ROWS = JOB_METRICS + "heldout_bpb_64window_estimate_tsv"   # a pairs job: header only
BROWSER_S = 180


@pytest.fixture(scope="module")
def plots_repo(fresh_repro, tmp_path_factory) -> Path:
    """A copy of the fresh repro with the template where .dvc/config looks for it."""
    built = REPO / TEMPLATE
    assert built.is_file(), f"{built} is missing: make setup builds it (tools/plots_page.py)"
    repo = clone(fresh_repro[0], tmp_path_factory.mktemp("plots") / "repo")
    (repo / TEMPLATE).parent.mkdir(exist_ok=True)
    shutil.copy(built, repo / TEMPLATE)
    return repo


def show(repo: Path, out: Path, *args: str) -> Path:
    dvc(repo, "plots", "show", "-o", str(out), *args)
    return out / "index.html"


def test_the_page_carries_its_scripts(plots_repo, tmp_path):
    page = show(plots_repo, tmp_path / "plots").read_text()
    assert "cdn.jsdelivr" not in page
    assert not re.search(r"<script[^>]*\bsrc=", page), "the page loads a script from elsewhere"
    assert "vega@5.20.2" in page and "vega-embed@6.18.2" in page


class Panels(HTMLParser):
    """Per DVC panel (a <div id> of the page): its drawn line paths and its text."""

    def __init__(self, ids):
        super().__init__()
        self.ids, self.open, self.depth = set(ids), None, 0
        self.lines = {i: [] for i in ids}
        self.text = {i: "" for i in ids}
        self.in_line_group = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self.open is None:
            if tag == "div" and attrs.get("id") in self.ids:
                self.open, self.depth = attrs["id"], 1
            return
        if tag == "div":
            self.depth += 1
        if tag == "g" and "mark-line" in (attrs.get("class") or ""):
            self.in_line_group = self.depth
        if tag == "path" and self.in_line_group:
            self.lines[self.open].append(attrs.get("d") or "")

    def handle_endtag(self, tag):
        if self.open is not None and tag == "g":
            self.in_line_group = 0
        if self.open is not None and tag == "div":
            self.depth -= 1
            if self.depth == 0:
                self.open = None

    def handle_data(self, data):
        if self.open is not None:
            self.text[self.open] += data


def open_offline(page: Path, tmp_path: Path) -> tuple[str, str]:
    """(DOM after the render, the browser's log) of `page` in headless chromium that
    can resolve no host name and whose proxy is a closed local port."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (make test-browser installs Debian's)")
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--proxy-server=127.0.0.1:9", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=15000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=BROWSER_S)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@pytest.mark.browser
def test_every_panel_draws_its_curve_offline(plots_repo, tmp_path):
    dom, log = open_offline(show(plots_repo, tmp_path / "plots"), tmp_path)
    panels = Panels(DRAWN + (NO_ROWS,))
    panels.feed(dom)
    for panel in DRAWN:
        # each panel's line: one path through the job's 5 points (outer 0..4): M + 4 L
        drawn = [d for d in panels.lines[panel] if d.count("L") >= 4]
        assert drawn, f"{panel} drew no line: {panels.lines[panel]}"
    # the held-out bits per byte of a pairs job: a line that says so, not an empty panel
    assert panels.lines[NO_ROWS] == []
    assert "no points to draw" in panels.text[NO_ROWS]
    # no script error: chromium logs each uncaught one, as the control below shows
    assert "Uncaught" not in log, log[-2000:]


@pytest.mark.browser
def test_dvc_own_page_draws_nothing_offline(plots_repo, tmp_path):
    """The control: without the template, DVC's page asks a CDN for Vega and the same
    browser draws no mark."""
    plain = clone(plots_repo, tmp_path / "repo")
    dvc(plain, "config", "--unset", "plots.html_template")
    dom, log = open_offline(show(plain, tmp_path / "plots"), tmp_path)
    panels = Panels(DRAWN)
    panels.feed(dom)
    assert all(lines == [] for lines in panels.lines.values()), panels.lines
    # its CDN <script>s did not arrive, so each panel's call found no vega-embed
    assert "Uncaught ReferenceError: vegaEmbed is not defined" in log, log[-2000:]
