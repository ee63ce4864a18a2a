"""The fast set (`-m "not slow"`) starts no process of its own: every fixture that starts one is in support.slow's table
or depends on one that is, and the table names only fixtures defined where it says."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support.slow import STARTERS, STARTS_PROCESSES

TESTS = Path(__file__).resolve().parent


def fixtures() -> Iterator[tuple[str, str, set[str], set[str]]]:
    """Every fixture the tests define: where (its conftest's folder, or its test module), its name, the fixtures it
    takes and the names it calls."""
    for path in sorted(TESTS.rglob("*.py")):
        if "support" in path.relative_to(TESTS).parts or not (path.name == "conftest.py" or path.name.startswith("test_")):
            continue
        where = (path.parent if path.name == "conftest.py" else path).relative_to(TESTS.parent).as_posix()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d).startswith("pytest.fixture") for d in node.decorator_list
            ):
                called = {
                    n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
                    for n in ast.walk(node)
                    if isinstance(n, ast.Call)
                }
                yield where, node.name, {a.arg for a in node.args.args}, called


def test_every_fixture_that_starts_a_process_makes_its_tests_slow():
    found = list(fixtures())
    slow = set().union(*STARTS_PROCESSES.values())
    while grown := {name for _, name, takes, _ in found if takes & slow} - slow:
        slow |= grown  # a fixture that takes a slow one is slow too (model_env, say)
    left_out = [
        f"{where}::{name}"
        for where, name, takes, called in found
        if called & STARTERS and name not in STARTS_PROCESSES.get(where, ()) and not takes & slow
    ]
    assert left_out == [], "add them to STARTS_PROCESSES in tests/support/slow.py"


def test_the_table_names_only_fixtures_defined_where_it_says():
    defined = {(where, name) for where, name, _, _ in fixtures()}
    stale = [f"{where}::{name}" for where, names in STARTS_PROCESSES.items() for name in sorted(names)]
    assert [s for s in stale if tuple(s.split("::")) not in defined] == []
