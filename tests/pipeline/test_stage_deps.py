"""dvc.yaml's code deps are the import graph's (tools/stage_deps.py, `make deps`):
a new import in a stage's code that dvc.yaml does not name fails here, fast,
before the tracer test (test_deps.py) runs the stages."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("stage_deps", REPO / "tools" / "stage_deps.py")
stage_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage_deps)


def test_dvc_yaml_code_deps_match_the_import_graph():
    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    assert stage_deps.rewritten(text) == text, "dvc.yaml's code deps drifted: run `make deps`"


def test_a_new_import_changes_the_stage_deps(tmp_path):
    for part in ("stages", "sparktrain"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "sparktrain" / "export" / "extra.py").write_text("VALUE = 1\n")
    before = stage_deps.code_deps("stages.eval", tmp_path)
    assert "sparktrain/export/extra.py" not in before
    script = tmp_path / "stages" / "eval.py"
    script.write_text("import sparktrain.export.extra  # noqa: F401\n" + script.read_text())
    after = stage_deps.code_deps("stages.eval", tmp_path)
    assert "sparktrain/export/extra.py" in after or "sparktrain/export" in after
    assert after[0] == "stages/eval.py"


def test_a_folder_used_mostly_is_one_dep():
    deps = stage_deps.code_deps("stages.step")
    assert "sparktrain/core" in deps and "sparktrain/train" in deps
    assert not any(d.startswith("sparktrain/core/") for d in deps)
