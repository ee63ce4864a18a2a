"""The fast set (`-m "not slow"`) starts no process of its own: every fixture that starts one is in support.slow's table
or depends on one that is; the table names only fixtures the suite defines, and each fixture name is defined once, so
a name means one fixture wherever a test asks for it (a parametrized argument never takes a fixture's name either)."""

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
    slow = set(STARTS_PROCESSES)
    while grown := {name for _, name, takes, _ in found if takes & slow} - slow:
        slow |= grown  # a fixture that takes a slow one is slow too (model_env, say)
    left_out = [
        f"{where}::{name}"
        for where, name, takes, called in found
        if called & STARTERS and name not in STARTS_PROCESSES and not takes & slow
    ]
    assert left_out == [], "add them to STARTS_PROCESSES in tests/support/slow.py"


def test_the_table_names_only_fixtures_the_suite_defines():
    defined = {name for _, name, _, _ in fixtures()}
    assert sorted(STARTS_PROCESSES - defined) == []


def test_each_fixture_name_is_defined_once():
    places: dict[str, list[str]] = {}
    for where, name, _, _ in fixtures():
        places.setdefault(name, []).append(where)
    assert {name: where for name, where in places.items() if len(where) > 1} == {}


def parametrized() -> Iterator[tuple[str, str]]:
    """Every argument name a test's `pytest.mark.parametrize` gives, with the test."""
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for mark in node.decorator_list:
                if isinstance(mark, ast.Call) and ast.unparse(mark.func) == "pytest.mark.parametrize":
                    names = ast.literal_eval(mark.args[0])
                    for name in names.split(",") if isinstance(names, str) else names:
                        yield name.strip(), f"{path.relative_to(TESTS.parent)}::{node.name}"


def test_no_parametrized_argument_takes_a_fixtures_name():
    # It would hide the fixture from the test, and read as one in `item.fixturenames` (a slow test where none is).
    fixture_names = {name for _, name, _, _ in fixtures()}
    assert [f"{test}: {name}" for name, test in parametrized() if name in fixture_names] == []
