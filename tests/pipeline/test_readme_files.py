"""docs/outputs.md's table of the files under out/train/<job>/ names every output
dvc.yaml declares there (a file, or the folder it sits in: corpus/, dvclive/)."""
from __future__ import annotations

import re

from .conftest import REPO, stage_paths


def test_the_files_table_lists_every_declared_output():
    page = (REPO / "docs" / "outputs.md").read_text()
    table = page.split("\n| file | written by | DVC |\n", 1)[1].split("\n\n", 1)[0]
    listed = {name.rstrip("/") for name in re.findall(r"^\| `([^`]+)` \|", table, flags=re.M)}
    declared = set()
    for paths in stage_paths(REPO).values():
        for path in paths:
            rest = path.split("/", 3)[3]  # out/train/<job>/REST
            declared.add(rest.split("/", 1)[0])  # a file, or the folder it is in
    assert declared <= listed, sorted(declared - listed)
