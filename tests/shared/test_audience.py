"""The token audiences have one home, `agentfn.shared.contract.audience`: every Python file names them through it,
and the chart's values name the same ones."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from support import TOOLS
from support.chart import CHART

from agentfn.devstack.harness.servers import READ_TOOLS, ROOT
from agentfn.shared import contract
from agentfn.shared.contract import audience

# An audience spelled as a string literal, or an f-string's start of one: what only `audience()` may write.
SPELLED = re.compile(r"""["']agentfn:(?:(?:memory|page|tool|upstream)\b|\{)""")
# Folders that are not the project's sources: tools' caches, the venv, what the platform writes at run time.
NOT_SOURCES = {"__pycache__", "var", "build"}


@pytest.mark.parametrize(
    ("part", "tool", "expected"),
    [
        ("memory", None, "agentfn:memory"),
        ("page", None, "agentfn:page"),
        ("tool", "run_code", "agentfn:tool:run_code"),
        ("tool", "platform_status", "agentfn:tool:platform_status"),
        ("upstream", "list_models", "agentfn:upstream:list_models"),
    ],
)
def test_audience(part, tool, expected):
    assert audience(part, tool) == expected


@pytest.mark.parametrize(
    ("part", "tool"),
    [
        pytest.param("model", None, id="a part no token is exchanged for"),
        pytest.param("", None, id="no part"),
        pytest.param("memory", "remember", id="memory with a tool"),
        pytest.param("page", "open_page", id="the page fetcher with a tool"),
        pytest.param("tool", None, id="a tool without its name"),
        pytest.param("upstream", None, id="an upstream without its tool"),
        pytest.param("tool", "Run-Code", id="a name outside the tool name rule"),
        pytest.param("tool", "run_code\n", id="a name with a trailing newline"),
        pytest.param("tool", "", id="an empty name"),
    ],
)
def test_audience_refuses(part, tool):
    with pytest.raises(ValueError):
        audience(part, tool)


def python_files() -> list[Path]:
    """The project's Python files, wherever they sit below the repository."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in NOT_SOURCES]
        found += [Path(folder, name) for name in files if name.endswith(".py")]
    return found


def test_no_file_spells_an_audience_by_hand():
    home = {Path(contract.__file__).resolve(), Path(__file__).resolve()}
    files = [path for path in python_files() if path.resolve() not in home]
    assert len(files) > 100  # the walk found the sources
    spelled = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SPELLED.search(line)
    ]
    assert not spelled, f"name the audience with agentfn.shared.contract.audience: {spelled}"


def test_the_charts_audiences_are_the_contracts():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    parts = values["identity"]["audiences"]
    assert parts.pop("memory") == audience("memory")
    assert parts.pop("page") == audience("page")
    assert parts == {tool: audience("tool", tool) for tool in TOOLS}
    # The upstreams' keys are the read tools' names in camelCase.
    upstreams = {
        re.sub("[A-Z]", lambda m: "_" + m[0].lower(), key): value for key, value in values["upstreams"]["audiences"].items()
    }
    assert upstreams == {tool: audience("upstream", tool) for tool in READ_TOOLS}
