"""Every import path is its folder, and no import cycle among the project's modules.

The project's distributions (`pyproject.toml`, `devstack/pyproject.toml`) find their packages under `src/`, with no
mapping of a name to another folder: `agentfn.model.loop` is `src/agentfn/model/loop.py`. The import graph is
read from those sources with `ast`. Every import counts, wherever it stands: at
the top, inside a function (a cycle deferred to run time is still a cycle), or under `TYPE_CHECKING` (the
two modules still know each other). A package's own `__init__` importing its modules is not counted against
them: Python runs it before them, as the operator's handlers rely on.
"""

from __future__ import annotations

import ast
import graphlib
import importlib.util
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = [ROOT / "pyproject.toml", ROOT / "devstack" / "pyproject.toml"]


def sources() -> list[Path]:
    """The folders the distributions find their packages in (`[tool.setuptools.packages.find] where`)."""
    found = []
    for pyproject in DISTRIBUTIONS:
        setuptools = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]
        found += [(pyproject.parent / folder).resolve() for folder in setuptools["packages"]["find"]["where"]]
    return found


def modules(roots: list[Path]) -> dict[str, Path]:
    """Module name -> file, for every Python file below each source folder: the name is the file's path."""
    found = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project's modules that `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            targets = [f"{base}.{alias.name}" for alias in node.names]  # a module, or a name in one
        else:
            continue
        for target in targets:
            while target and target not in known:  # the longest module the import names
                target = target.rpartition(".")[0]
            if target and target != name and not (path.name == "__init__.py" and target.startswith(name + ".")):
                found.add(target)
    return found


def cycle(files: dict[str, Path]) -> list[str] | None:
    """One import cycle among `files` (module name -> file), or None."""
    graph = {name: imports(name, path, set(files)) for name, path in files.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return error.args[1]
    return None


def test_no_distribution_maps_a_name_to_another_folder():
    for pyproject in DISTRIBUTIONS:
        assert "package-dir" not in tomllib.loads(pyproject.read_text())["tool"]["setuptools"], pyproject


def test_every_import_path_is_its_folder():
    files = modules(sources())
    assert len(files) > 100
    for name, path in files.items():
        spec = importlib.util.find_spec(name)
        assert spec is not None and Path(spec.origin).resolve() == path, f"{name} is not imported from {path}"


def test_the_project_has_no_import_cycle():
    files = modules(sources())
    known = {"agentfn.shared.tool_function", "agentfn.memory.embedder", "agentfn.devstack.issuer", "agentfn.operator"}
    assert known <= set(files)
    assert cycle(files) is None


CASES = [
    ("none", {"a": "import json\nfrom . import b\n", "b": "x = 1\n"}, False),
    ("at the top", {"a": "from . import b\n", "b": "from .a import x\n"}, True),
    ("absolute", {"a": "import p.b\n", "b": "from p import a\n"}, True),
    ("inside a function", {"a": "from .b import y\n", "b": "def f():\n    from .a import x\n"}, True),
    ("under TYPE_CHECKING", {"a": "from .b import y\n", "b": "if TYPE_CHECKING:\n    from .a import X\n"}, True),
    ("through a third", {"a": "from . import b\n", "b": "from . import c\n", "c": "from .a import x\n"}, True),
    ("a subpackage's parent", {"a": "from .sub import c\n", "sub/__init__": "", "sub/c": "from ..a import x\n"}, True),
    ("the package runs its modules", {"__init__": "from . import a\n", "a": "from p import __name__\n"}, False),
]


@pytest.mark.parametrize("texts, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_cycle_guard_bites(tmp_path, texts, expected):
    (tmp_path / "p").mkdir()
    for module, text in {"__init__": "", **texts}.items():
        (tmp_path / "p" / f"{module}.py").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "p" / f"{module}.py").write_text(text)
    assert (cycle(modules([tmp_path])) is not None) == expected
