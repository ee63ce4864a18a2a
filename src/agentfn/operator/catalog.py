"""The tool catalog: which tools exist, which function serves each, and the channels its descriptor allows
(never alone nor over MCP for a tool that changes state, whatever the descriptor offers).

The source is the tools' own descriptor files, each in its function's package (`agentfn/<function>/tool.json`).
The built-in tools come from the contract the model function reads too (`agentfn.shared.contract`): the memory
tools `remember` and `forget`, which the model function serves through memory's doors and which have no tool
function of their own, and `open_page`, only while the page fetcher has no `tool.json` yet (a descriptor file always wins).

`AGENTFN_TOOL_CATALOG_DIR` points at a folder of `<function>/tool.json` (in a cluster: the descriptors
mounted from a ConfigMap); unset, the installed `agentfn.<function>` packages are read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agentfn.shared.contract import ALONE, MCP, NEVER_ALONE_OR_MCP, STEP, builtin_tools
from agentfn.shared.tool_function import DESCRIPTOR_FILE, changes_state, check_descriptor

from .config import Config

# Tools only some agents may ever be given (RFC 0002: only the reviewer runs code and opens pages).
ONLY_FOR = {"run_code": frozenset({"code-reviewer"}), "open_page": frozenset({"code-reviewer"})}


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    function: str  # the function that serves it (its package, agentfn.<function>)
    callable_alone: bool
    mcp: bool
    changes_state: bool = True  # as its descriptor says; one that does not say is taken to change state

    @property
    def step_only(self) -> bool:
        """Never callable alone or over MCP, whatever its descriptor offers: the operator's own list, and every tool
        that changes state (only an agent's step has a person to approve the call)."""
        return self.name in NEVER_ALONE_OR_MCP or self.changes_state

    @property
    def channels(self) -> frozenset[str]:
        """The channels a grant may open for this tool."""
        allowed = {STEP}
        if not self.step_only:
            allowed |= {ALONE} if self.callable_alone else set()
            allowed |= {MCP} if self.mcp else set()
        return frozenset(allowed)


Catalog = Mapping[str, CatalogEntry]


def from_descriptors(entries: Iterable[tuple[str, dict]]) -> dict[str, CatalogEntry]:
    """(function, descriptor) pairs -> the catalog; a tool named twice is a packaging mistake."""
    catalog: dict[str, CatalogEntry] = {}
    for function, raw in entries:
        descriptor = check_descriptor(raw)
        name = descriptor["name"]
        if name in catalog:
            raise ValueError(f"tool {name} is described twice ({catalog[name].function} and {function})")
        catalog[name] = CatalogEntry(
            name, function, descriptor["callable_alone"], descriptor["mcp"], changes_state(descriptor)
        )
    return catalog


def _descriptor_files(directory: Path) -> list[tuple[str, dict]]:
    return [(path.parent.name, json.loads(path.read_text())) for path in sorted(directory.glob(f"*/{DESCRIPTOR_FILE}"))]


def _installed_descriptors() -> list[tuple[str, dict]]:
    found = []
    for package in resources.files("agentfn").iterdir():
        path = package.joinpath(DESCRIPTOR_FILE)
        if path.is_file():
            found.append((package.name, json.loads(path.read_text())))
    return found


def load(env: Mapping[str, str] | None = None) -> dict[str, CatalogEntry]:
    configured = Config.from_env(env).tool_catalog_dir
    if configured:
        if not Path(configured).is_dir():
            raise RuntimeError(f"AGENTFN_TOOL_CATALOG_DIR={configured} is not a folder")
        files = _descriptor_files(Path(configured))
    else:
        files = _installed_descriptors()
    if not files:
        raise RuntimeError("no tool descriptors found: set AGENTFN_TOOL_CATALOG_DIR")
    catalog = from_descriptors(files)
    for function, descriptor in builtin_tools():
        if descriptor["name"] not in catalog:
            catalog.update(from_descriptors([(function, descriptor)]))
    return catalog
