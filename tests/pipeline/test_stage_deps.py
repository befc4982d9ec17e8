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


def test_a_folder_used_whole_is_one_dep_and_one_used_in_part_is_listed():
    evals = stage_deps.code_deps("stages.eval")
    assert "sparktrain/data" in evals   # every module of data/ runs in the eval stage
    assert not any(d.startswith("sparktrain/data/") for d in evals)
    deps = stage_deps.code_deps("stages.step")
    # the step never samples text (model/sampling.py): model/ is listed module by module
    assert "sparktrain/model" not in deps and "sparktrain/model/layers.py" in deps
    assert "sparktrain/model/sampling.py" not in deps
    # core/publish.py (spark export's publisher) never runs in a stage: core/ by module
    assert "sparktrain/core" not in deps and "sparktrain/core/errors.py" in deps
    assert "sparktrain/core/publish.py" not in deps
    # the step never imports bench.py or plan.py: train/ is listed module by module
    assert "sparktrain/train" not in deps and "sparktrain/train/loop.py" in deps
    assert "sparktrain/train/bench.py" not in deps


STAGES = ("check_params", "decode_bc", "tokenizer", "prepare", "train_status", "step", "eval")


def _stages_reaching(rel: str, root: Path = REPO) -> list[str]:
    return [s for s in STAGES if rel in {p.relative_to(root).as_posix()
                                         for p in stage_deps.reached(f"stages.{s}", root)}]


def test_only_the_stages_that_run_the_model_depend_on_its_code():
    """A stage imports what it runs: the model's code only under step and eval; the
    stages before them see its config (params.yaml's scale) and batches at most."""
    for module in ("layers", "build", "backend", "weights"):
        assert _stages_reaching(f"sparktrain/model/{module}.py") == ["step", "eval"], module
    assert _stages_reaching("sparktrain/model/parallel.py") == ["step"]
    assert _stages_reaching("sparktrain/data/heldout.py") == ["eval"]
    assert _stages_reaching("sparktrain/data/pairs_score.py") == ["eval"]
    for rel in ("sparktrain/repro/check.py", "sparktrain/repro/toolenv.py",
                "sparktrain/eval/compare.py", "sparktrain/eval/experiments.py",
                "sparktrain/export/hf.py"):
        assert _stages_reaching(rel) == [], rel
    decode = {p.relative_to(REPO).as_posix() for p in stage_deps.reached("stages.decode_bc")}
    assert {d for d in decode if d.startswith("sparktrain/model/")} == {
        "sparktrain/model/__init__.py", "sparktrain/model/config.py",
        "sparktrain/model/devices.py"}
    assert not any(d.startswith(("sparktrain/data/source", "sparktrain/data/corpus"))
                   for d in decode), "decode-bc needs the bytecode and the job, not the data"
