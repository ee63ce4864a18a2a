"""Static tier: the tool catalog is the tools' own descriptor files, plus the memory tools."""

from __future__ import annotations

import json
import shutil

import pytest
from support.operator import ROOT

from agentfn.operator import catalog


def test_the_catalog_is_the_descriptor_files_plus_the_memory_tools(tool_catalog):
    described = {p.parent.name: json.loads(p.read_text())["name"] for p in (ROOT / "src" / "agentfn").glob("*/tool.json")}
    assert described, "no src/agentfn/*/tool.json"
    for function, name in described.items():
        assert tool_catalog[name].function == function
    assert tool_catalog["remember"].function == tool_catalog["forget"].function == "memory"
    assert "open_page" in tool_catalog and tool_catalog["open_page"].function == "page"


def test_run_code_open_page_and_memory_are_step_only_whatever_a_descriptor_says(tool_catalog, tmp_path):
    for name in ("run_code", "open_page", "remember", "forget"):
        assert tool_catalog[name].channels == {"step"}
    # A descriptor that claims more is overruled by the operator's own list.
    folder = tmp_path / "run_code"
    folder.mkdir()
    descriptor = json.loads((ROOT / "src" / "agentfn" / "run_code" / "tool.json").read_text())
    (folder / "tool.json").write_text(json.dumps({**descriptor, "callable_alone": True, "mcp": True}))
    assert catalog.load({"AGENTFN_TOOL_CATALOG_DIR": str(tmp_path)})["run_code"].channels == {"step"}


def test_a_page_descriptor_replaces_the_built_in_one(tmp_path):
    folder = tmp_path / "page"
    folder.mkdir()
    builtin = json.loads((ROOT / "src" / "agentfn" / "shared" / "contract" / "page.json").read_text())["tools"][0]
    (folder / "tool.json").write_text(json.dumps({**builtin, "description": "the page fetcher's own descriptor"}))
    shutil.copytree(
        ROOT / "src" / "agentfn" / "platform_status",
        tmp_path / "platform_status",
        ignore=lambda d, names: [n for n in names if n != "tool.json"],
    )
    loaded = catalog.load({"AGENTFN_TOOL_CATALOG_DIR": str(tmp_path)})
    assert set(loaded) == {"open_page", "platform_status", "remember", "forget"}
    assert loaded["open_page"].function == "page"


def test_a_tool_described_twice_or_a_bad_descriptor_stops_the_start(tmp_path):
    for function in ("a", "b"):
        (tmp_path / function).mkdir()
        (tmp_path / function / "tool.json").write_text((ROOT / "src/agentfn/platform_status/tool.json").read_text())
    with pytest.raises(ValueError, match="described twice"):
        catalog.load({"AGENTFN_TOOL_CATALOG_DIR": str(tmp_path)})
    (tmp_path / "b" / "tool.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(ValueError, match="exactly the keys"):
        catalog.load({"AGENTFN_TOOL_CATALOG_DIR": str(tmp_path)})
    with pytest.raises(RuntimeError, match="not a folder"):
        catalog.load({"AGENTFN_TOOL_CATALOG_DIR": str(tmp_path / "nowhere")})
