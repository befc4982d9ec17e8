"""The house in floors (docs/README.md "Where the code is"):
every sparktrain/ module imports only from its own floor or below, no modules
import each other in a circle, and every command lives in sparktrain/cli/.

The graph is read from the code with ast, lazy imports inside functions
included, so a new import that runs up a floor fails here, naming the line.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sparktrain"

# Top floor first. A module's floor is that of the longest prefix listed here;
# every module of the package must have one (a new top-level module gets a floor
# on purpose, not by accident).
FLOORS = (
    ("cli", ("sparktrain.cli",)),
    # `spark compare` reads DVC's experiments as `spark sweep` does: it and the one reader
    # of experiments they share stand on their floor
    ("export, sweep, repro", ("sparktrain.export", "sparktrain.sweep", "sparktrain.repro",
                              "sparktrain.eval.compare", "sparktrain.eval.experiments")),
    ("eval", ("sparktrain.eval",)),
    ("train", ("sparktrain.train",)),
    ("data", ("sparktrain.data",)),
    # the schema, its knobs' roles, its error lines and its value types
    ("params", ("sparktrain.params", "sparktrain.knobs", "sparktrain.schema_errors",
                "sparktrain.schema_types")),
    ("model", ("sparktrain.model",)),
    ("bc", ("sparktrain.bc",)),
    # the process set-up (BLAS kernel and threads): what the gradient engine and records ask
    ("runtime", ("sparktrain.runtime",)),
    # the output gate knows a job folder by jobfiles' names: it stands on their floor
    ("jobfiles, gate", ("sparktrain.core.jobfiles", "sparktrain.core.gate")),
    ("ground", ("sparktrain", "sparktrain.core", "sparktrain.vocab")),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(imported sparktrain module, line) for every import in the file, at any depth."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # `from pkg import mod` imports pkg.mod when that is a module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a name in a.b
                target = target.rpartition(".")[0]
            if target.startswith("sparktrain") and target != name:
                found.append((target, node.lineno))
    return found


def floor_of(name: str) -> int:
    """0 = the top floor; the longest listed prefix decides."""
    best, floor = -1, None
    for level, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, floor = len(prefix), level
    if floor is None:
        raise AssertionError(f"{name} has no floor in tests/test_layers.py FLOORS")
    return floor


def graph() -> dict[str, list[tuple[str, int]]]:
    modules = package_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def test_every_module_has_a_floor():
    for name in package_modules():
        floor_of(name)


def test_no_import_runs_up_a_floor():
    upward, seen = [], set()
    for name, deps in graph().items():
        for dep, line in deps:
            if floor_of(dep) < floor_of(name) and (name, dep, line) not in seen:
                seen.add((name, dep, line))
                upward.append(f"{name}:{line} imports {dep} "
                              f"({FLOORS[floor_of(name)][0]} -> {FLOORS[floor_of(dep)][0]})")
    assert not upward, "imports that run up a floor:\n" + "\n".join(upward)


def test_no_circles():
    deps = {name: sorted({d for d, _ in edges}) for name, edges in graph().items()}
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    circles = []

    def visit(node, path):
        state[node] = 1
        for nxt in deps.get(node, ()):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(deps):
        if node not in state:
            visit(node, [node])
    assert not circles, "modules that import each other in a circle:\n" + "\n".join(circles)


def test_commands_live_in_cli_only():
    outside = [p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.rglob("*commands*.py")
               if p.parent != PACKAGE / "cli"]
    assert not outside, f"command modules outside sparktrain/cli/: {outside}"


def test_libraries_never_import_the_command_layer():
    for name, deps in graph().items():
        if floor_of(name) > 0:
            assert not [d for d, _ in deps if floor_of(d) == 0], name


@pytest.mark.parametrize("source, expected", [
    ("import sparktrain.train.loop\n", "sparktrain.train.loop"),
    ("from sparktrain.train import loop\n", "sparktrain.train.loop"),
    ("def f():\n    from sparktrain.cli import main\n", "sparktrain.cli"),
    ("from .loop import train_and_commit\n", "sparktrain.train.loop"),
])
def test_the_reader_sees_each_form_of_import(tmp_path, source, expected):
    path = tmp_path / "x.py"
    path.write_text(source)
    known = set(package_modules())
    assert [d for d, _ in imports_of("sparktrain.train.x", path, known)] == [expected]


# What a job's kind means is the data source's to answer (prompted, streamed, unit):
# a branch on its name or a guess from a record's keys outside data/ is a second source
# of that truth (docs/README.md, "Where the code is").
KIND_GUESSES = re.compile(r"source\.kind\b|is_pairs_model|[\"']zlib9_bpb[\"']\s+(not\s+)?in\b"
                          r"|kind\s*[!=]=\s*[\"'](pairs|corpus|text)[\"']")


def test_no_data_kind_is_guessed_outside_data():
    found = [f"{p.relative_to(PACKAGE.parent).as_posix()}:{n}: {line.strip()}"
             for p in PACKAGE.rglob("*.py") if PACKAGE / "data" not in p.parents
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if KIND_GUESSES.search(line)]
    assert not found, "data kinds guessed outside sparktrain/data/:\n" + "\n".join(found)
