"""What a part imports at run time, read from its source: the modules its entries import, following the project's own
modules wherever they import, lazy imports (inside a function) included.

Each image's build runs `python -m agentfn.shared.imports PART` and fails unless all of it imports with what the image
holds: a module imported only when asked (trafilatura, on the first page read) is imported at build time too, so a
broken install fails the build, not the first request. tests/test_dependencies.py reads the same walk to check that
each part's group installs what the part imports.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

GUNICORN = "agentfn.shared.gunicorn_conf"
PACKAGE = Path(__file__).resolve().parents[1]  # agentfn's folder (a namespace package: src/agentfn, or site-packages)


def entries(part: str) -> list[str]:
    """What an image runs: a function's app under gunicorn (the model function's image also runs the chart's `helm
    test` probe), or the operator's modules (kopf runs its package)."""
    if part == "operator":
        return sorted(f"agentfn.operator.{p.stem}" for p in (PACKAGE / "operator").glob("*.py"))
    found = [f"agentfn.{part}.app", GUNICORN]
    return [*found, "agentfn.cli.probe"] if part == "model" else found


def source_of(module: str) -> Path | None:
    """The file of one of the project's modules (its import path is its folder); None for anything else: another
    distribution's, or an attribute named as if it were a module (`from agentfn.x import name`). Nothing is imported."""
    if not module.startswith("agentfn."):
        return None
    base = PACKAGE.parent / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(entries: list[str]) -> tuple[set[str], set[tuple[str, tuple[str, ...]]]]:
    """The project's modules the entries reach, and every other import statement among them as (module, names): names
    is empty for `import module`, the imported names for `from module import names`."""
    seen, found, todo = set(), set(), list(entries)
    while todo:
        module = todo.pop()
        path = source_of(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        todo += [module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)]  # its packages' __init__
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                statements = [(a.name, ()) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                statements = [(base, tuple(a.name for a in node.names))]
            else:
                continue
            for name, names in statements:
                if name.startswith("agentfn."):
                    todo += [name, *(f"{name}.{n}" for n in names)]
                elif name.split(".")[0] not in sys.stdlib_module_names and name != "__future__":
                    found.add((name, names))
    return seen, found


def third_party(entries: list[str]) -> set[str]:
    """The top-level names of what the entries import from other distributions."""
    return {name.split(".")[0] for name, _ in imported(entries)[1]}


def import_all(part: str) -> list[str]:
    """Import everything the part imports at run time; returns what failed, one line each."""
    project, others = imported(entries(part))
    failed = []
    for module in sorted(project):
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - every failure is reported, not only the first
            failed.append(f"{module}: {type(error).__name__}: {error}")
    for module, names in sorted(others):
        try:
            loaded = importlib.import_module(module)
            for name in names:
                if name != "*" and not hasattr(loaded, name):
                    importlib.import_module(f"{module}.{name}")  # a submodule, as `from module import name` finds it
        except Exception as error:  # noqa: BLE001
            failed.append(f"{module}: {type(error).__name__}: {error}")
    return failed


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m agentfn.shared.imports PART (a function's package name, or operator)")
    part = sys.argv[1]
    failed = import_all(part)
    for line in failed:
        print(f"{part} cannot import {line}", file=sys.stderr)
    if failed:
        raise SystemExit(1)
    project, others = imported(entries(part))
    print(f"{part}: imported {len(project)} of the project's modules and {len(others)} other imports")


if __name__ == "__main__":
    main()
