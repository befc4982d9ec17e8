"""Every pointer to a section of the docs (a page, then the section in quotes, as docstrings,
comments, tools, tests, params files and the docs themselves write it) names a page
that exists and a heading of it that holds the quoted words, so splitting or renaming
a page cannot leave a dangling reference; and the reference pages stay short enough to
read (the dated results log, docs/results/, is apart)."""
from __future__ import annotations

import re

import pytest

from sparkhelp import ROOT

# a page, then one or more quoted section names: `docs/x.md "A"`, `docs/x.md, "A"`,
# `(docs/x.md "A", "B")`, `docs/x.md ("A")`
REF = re.compile(r'docs/([\w/]+\.md)[,:]? \(?((?:"[^"\n]{2,160}"(?:[,;]? (?:and )?)?)+)')
SOURCES = ("sparktrain", "stages", "tools", "tests", "data/programs", "docs")
FILES = ("README.md", "Makefile", "dvc.yaml", "params.yaml", "pyproject.toml")
MAX_REFERENCE_LINES = 600


def _texts():
    paths = [ROOT / f for f in FILES]
    for top in SOURCES:
        paths += [p for p in (ROOT / top).rglob("*")
                  if p.suffix in (".py", ".md", ".yaml", ".spark", ".sh") and p.is_file()]
    for path in paths:
        if path.name == "test_doc_refs.py":   # its own examples below
            continue
        # a reference may wrap across comment or docstring lines: join them
        yield path, re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]*)?", " ", path.read_text())


def _headings(page: str) -> list[str]:
    return [ln.lstrip("#").strip().lower()
            for ln in (ROOT / "docs" / page).read_text().splitlines() if ln.startswith("#")]


def references() -> list[tuple[str, str, str]]:
    found = []
    for path, text in _texts():
        for m in REF.finditer(text):
            for name in re.findall(r'"([^"]+)"', m.group(2)):
                found.append((str(path.relative_to(ROOT)), m.group(1), name))
    return found


def test_the_finder_sees_the_forms_the_code_writes():
    text = ('see docs/training.md "Progress"; (docs/model.md, "The model") and '
            '(docs/tools.md ("README figures")) and docs/results/coder.md "Alpha", "Beta"')
    got = [(m.group(1), re.findall(r'"([^"]+)"', m.group(2))) for m in REF.finditer(text)]
    assert got == [("training.md", ["Progress"]), ("model.md", ["The model"]),
                   ("tools.md", ["README figures"]), ("results/coder.md", ["Alpha", "Beta"])]
    assert len(references()) > 40


@pytest.mark.parametrize("where,page,section", references(), ids=lambda v: str(v)[:60])
def test_every_section_reference_names_a_heading_of_its_page(where, page, section):
    assert (ROOT / "docs" / page).is_file(), f"{where}: docs/{page} does not exist"
    words = section.rstrip(". ").lower()     # "What a job holds after ..." names a prefix
    assert any(words in h for h in _headings(page)), (
        f"{where}: docs/{page} has no heading with {section!r}")


def test_reference_pages_stay_readable():
    long = {p.name: n for p in (ROOT / "docs").glob("*.md")
            if (n := len(p.read_text().splitlines())) > MAX_REFERENCE_LINES}
    assert not long, long
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def _sh_lines(text: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)\n```", text, re.S)
    return [ln.split("#")[0].strip() for b in blocks for ln in b.splitlines()
            if ln.split("#")[0].strip()]


def test_the_readmes_sweep_and_tune_lines_are_the_walkthroughs_tested_lines():
    """README shows a `spark sweep` and a `spark tune` line and links the walk-through
    (docs/experiments.md) whose blocks, and the generated runs it shows (`$ ` lines), the
    e2e tests run as written: the same lines, so what README shows is what was run."""
    readme = _sh_lines((ROOT / "README.md").read_text())
    text = (ROOT / "docs" / "experiments.md").read_text()
    walk = _sh_lines(text) + [ln[2:] for ln in text.splitlines() if ln.startswith("$ ")]
    shown = [ln for ln in readme if ln.startswith(("spark sweep", "spark tune"))]
    assert len(shown) == 2, shown
    for line in shown:
        assert line in walk, line


def test_every_relative_link_of_the_docs_lands_on_a_file():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path, _, anchor = target.partition("#")
            if "://" in target:
                continue
            if path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and not path and anchor not in _slugs(page):   # a table of contents
                broken.append(f"{page.relative_to(ROOT)}: #{anchor}")
    assert not broken, broken


def _slugs(page) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped,
    spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", ln.lstrip("#").strip().lower()).replace(" ", "-")
            for ln in page.read_text().splitlines() if ln.startswith("#")}
