"""`./dev lint`, the style checks CI runs before the tests: both ruff checks run over what it is given, and a
finding of either fails it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "clean": ('x = {"a": 1}\n', 0, []),
    "a lint finding": ("import os\n", 1, ["F401"]),
    "unformatted": ("x = {  'a':1 }\n", 1, ["would be reformatted"]),
    "both": ("import os\nx = {  'a':1 }\n", 1, ["F401", "would be reformatted"]),
}


@pytest.mark.parametrize("source, status, findings", CASES.values(), ids=CASES.keys())
def test_lint_fails_on_any_finding_of_either_check(tmp_path, source, status, findings):
    path = tmp_path / "module.py"
    path.write_text(source)
    done = subprocess.run([str(ROOT / "dev"), "lint", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == status, done.stdout + done.stderr
    assert all(f in done.stdout for f in findings), done.stdout
    assert path.read_text() == source  # it checks, and never rewrites


def test_ci_runs_the_style_checks_before_the_tests():
    commands = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert commands.index("./dev lint") < commands.index("./dev test")
