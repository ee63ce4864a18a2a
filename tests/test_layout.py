"""The tests mirror the source: every part (`src/agentfn/<part>`, and the dev stack's `agentfn.devstack`) has its
`tests/<part>`, every folder of tests names a part or what crosses parts, and nothing outside tests/ imports from it
(the harness the benchmarks and the studies share with the tests is agentfn.devstack.harness)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# What crosses parts, and what the tests keep for themselves: not a part's folder.
ACROSS = {"e2e", "chart", "images", "policies", "schemas", "support"}
# The names under tests/ a module could import it by: the package on pytest's path, and the folder itself.
TEST_MODULES = {"support", "conftest", "tests"} | {p.stem for p in TESTS.glob("test_*.py")}


def parts() -> set[str]:
    found = {p.name for p in (ROOT / "src" / "agentfn").iterdir() if (p / "__init__.py").exists()}
    return found | {"devstack"}


def test_every_part_has_its_tests():
    missing = sorted(p for p in parts() if not list((TESTS / p).glob("test_*.py")))
    assert missing == [], "a part without tests/<part>/test_*.py"


def test_every_folder_of_tests_is_a_part_or_crosses_parts():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert sorted(folders - parts() - ACROSS) == []


def tracked_python_outside_tests() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in listed.split() if not name.startswith("tests/")]


def imports_from_tests(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [f"{path.relative_to(root)}: {n}" for n in names if n.split(".")[0] in TEST_MODULES]
    text = path.read_text()
    if '"tests"' in text and "sys.path" in text:  # tests/ put on the path by hand
        found.append(f"{path.relative_to(root)}: sys.path")
    return found


def test_nothing_outside_the_tests_imports_from_them():
    assert [hit for path in tracked_python_outside_tests() for hit in imports_from_tests(path)] == []


def test_the_check_sees_an_import_from_the_tests(tmp_path):
    # The check above can fail: a benchmark written as they were before the harness moved is caught.
    bench = tmp_path / "bench.py"
    bench.write_text('import sys\nsys.path.insert(0, str(ROOT / "tests"))\nfrom support import Gunicorn\n')
    assert imports_from_tests(bench, tmp_path) == ["bench.py: support", "bench.py: sys.path"]
