"""Each DVC stage's code deps, computed from the import graph (`make deps`).

    python tools/stage_deps.py            # say which stages' deps differ (exit 1 if any)
    python tools/stage_deps.py --write    # rewrite dvc.yaml's deps with them

A stage runs `python3 -m stages.X`; its code is every project module that
stages/X.py reaches through imports (read with ast, imports inside functions
included, so the list is a superset of what one run loads), plus each package's
__init__.py on the way. A package folder the stage uses whole is one folder dep;
the modules of a folder it uses in part are listed file by file, so an edit to a
module the stage never imports (the model's layers for the tokenizer stage,
`spark repro-check` for any stage) re-runs nothing. The data deps (every entry not
under stages/ or sparktrain/) are kept as dvc.yaml has them, after the code.

tests/pipeline/test_stage_deps.py fails when dvc.yaml and the graph disagree;
tests/pipeline/test_deps.py runs the stages under a tracer and checks that every
file they really open is covered (docs/pipeline.md, "Deps").
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

from sparktrain import runtime  # first: the BLAS kernel and threads before numpy loads

runtime.start()

ROOT = Path(__file__).resolve().parents[1]
CODE = ("stages/", "sparktrain/")
WIDTH = 96


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """stages.common -> stages/common.py; a package -> its __init__.py."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_names(path: Path, name: str) -> set[str]:
    """Every module name an import in the file may load (project modules or not)."""
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def reached(module: str, root: Path = ROOT) -> set[Path]:
    """The project files `python -m module` can import, packages' __init__ included."""
    todo, seen = [module], set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            sub = ".".join(parts[:i])
            path = module_file(sub, root)
            if path is None or path in seen:
                continue
            seen.add(path)
            todo.extend(n for n in imported_names(path, sub)
                        if n.split(".")[0] in ("stages", "sparktrain"))
    return seen


def code_deps(module: str, root: Path = ROOT) -> list[str]:
    """The stage's code deps: its script, the stage glue, then the library: a folder the
    stage uses every module of as one entry, the others module by module."""
    used = {p.relative_to(root).as_posix() for p in reached(module, root)}
    script = module.replace(".", "/") + ".py"
    deps = [script] + sorted(u for u in used if u.startswith("stages/") and u != script)
    library = sorted(u for u in used if u.startswith("sparktrain/"))
    folders = sorted({u.rsplit("/", 1)[0] for u in library if u.count("/") >= 2})
    whole = set()
    for folder in folders:
        modules = sorted(p.relative_to(root).as_posix() for p in (root / folder).rglob("*.py"))
        if all(m in used for m in modules):
            whole.add(folder)
    for entry in library:
        folder = next((f for f in whole if entry.startswith(f + "/")), None)
        item = folder or entry
        if item not in deps:
            deps.append(item)
    return deps


def _flow(entries: list[str], indent: str) -> list[str]:
    """`deps: [a, b, ...]` wrapped at WIDTH; entries with YAML indicators quoted."""
    items = [f'"{e}"' if re.search(r"[${}\[\],:#]", e) else e for e in entries]
    lines, line = [], f"{indent}deps: ["
    pad = " " * len(line)
    for i, item in enumerate(items):
        piece = item + ("]" if i == len(items) - 1 else ",")
        if len(line) + 1 + len(piece) > WIDTH and not line.endswith("["):
            lines.append(line)
            line = pad + piece
        else:
            line = line + ("" if line.endswith("[") else " ") + piece
    lines.append(line)
    return lines


def stage_blocks(text: str) -> dict[str, tuple[int, int, str, list[str]]]:
    """stage -> (first line of its deps, line after them, its cmd's module, data deps)."""
    from sparktrain.core.safeload import load_yaml

    stages = load_yaml(text, "dvc.yaml")["stages"]
    lines = text.splitlines()
    found, current = {}, None
    for i, line in enumerate(lines):
        m = re.match(r"^  ([A-Za-z0-9_-]+):\s*$", line)
        if m and m.group(1) in stages:
            current = m.group(1)
        if current and re.match(r"^    deps:", line):
            end = i + 1
            while end < len(lines) and lines[end].startswith("      "):  # the list's lines
                end += 1
            stage = stages[current]
            module = stage["cmd"].split()[-1]
            data = [d for d in stage.get("deps", []) if not str(d).startswith(CODE)]
            found[current] = (i, end, module, data)
    return found


def rewritten(text: str, root: Path = ROOT) -> str:
    lines = text.splitlines()
    blocks = sorted(stage_blocks(text).values(), reverse=True)
    for start, end, module, data in blocks:
        lines[start:end] = _flow(code_deps(module, root) + data, "    ")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/stage_deps.py", description=__doc__.split("\n\n")[0],
        epilog="example: python tools/stage_deps.py --write   (then commit dvc.yaml)")
    parser.add_argument("--write", action="store_true", help="rewrite dvc.yaml in place")
    parser.add_argument("--dvc-yaml", type=Path, default=ROOT / "dvc.yaml")
    args = parser.parse_args(argv)
    text = args.dvc_yaml.read_text(encoding="utf-8")
    new = rewritten(text, args.dvc_yaml.resolve().parent)
    if args.write:
        if new != text:
            args.dvc_yaml.write_text(new, encoding="utf-8")
        print(f"{args.dvc_yaml.name}: deps from the import graph ({len(new.splitlines())} lines)")
        return 0
    if new == text:
        print(f"{args.dvc_yaml.name}: every stage's code deps match the import graph")
        return 0
    print(f"{args.dvc_yaml.name}: code deps differ from the import graph; run `make deps`",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
