"""The contract between the parts, written once: each reads it from here.

- the channels a tool is called through: `step` (inside an agent's loop), `alone` (CallTool on its own), `mcp`;
- the tool sets both enforce: the memory tools, and the tools never callable alone nor over MCP whatever a
  grant or a descriptor says (RFC 0002: those are a reviewed list of reads);
- the built-in tools' descriptors (`contract/memory.json`, `contract/page.json`): the tools the model function
  serves through another part's doors, which the operator's catalog lists too;
- the registry's JSON Schema (`contract/registry.schema.json`): what the operator writes and the model function
  accepts, and the name rules (tool names, agent names, memory modes, approvals) taken from it;
- the audiences of the tokens a caller's token is exchanged for (`audience`).
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

STEP, ALONE, MCP = CHANNELS = ("step", "alone", "mcp")
MEMORY_TOOLS = frozenset({"remember", "forget"})
NEVER_ALONE_OR_MCP = frozenset({"run_code", "open_page"}) | MEMORY_TOOLS
BUILTIN_FILES = ("memory.json", "page.json")
# The parts a token is exchanged for: one audience each, or one per tool.
SINGLE_AUDIENCES, TOOL_AUDIENCES = ("memory", "page"), ("tool", "upstream")


def _data(name: str) -> Any:
    return json.loads(resources.files(__package__).joinpath("contract", name).read_text())


@functools.cache
def registry_schema() -> dict[str, Any]:
    return _data("registry.schema.json")


_defs = registry_schema()["$defs"]
TOOL_NAME = re.compile(_defs["toolName"]["pattern"])
AGENT_NAME = re.compile(registry_schema()["properties"]["agents"]["propertyNames"]["pattern"])
MEMORY_MODES = tuple(_defs["agent"]["properties"]["memory"]["enum"])
APPROVALS = tuple(_defs["access"]["properties"]["approval"]["enum"])
REGISTRY_API_VERSION = registry_schema()["properties"]["apiVersion"]["const"]


def audience(part: str, tool: str | None = None) -> str:
    """The audience of a token exchanged for `part`: "memory", "page", "tool" (a tool function, `tool` its name)
    or "upstream" (the platform service behind the read tool `tool`).

    Both ends of every call name the audience from here, the one exchanging a caller's token for it and the one
    taking only tokens with it, so the two cannot drift apart."""
    if part in SINGLE_AUDIENCES and tool is None:
        return f"agentfn:{part}"
    if part in TOOL_AUDIENCES and tool is not None and TOOL_NAME.fullmatch(tool):
        return f"agentfn:{part}:{tool}"
    raise ValueError(f"no audience for part {part!r} and tool {tool!r}")


def builtin_tools() -> list[tuple[str, dict[str, Any]]]:
    """(function, descriptor) of each built-in tool: the part whose doors serve it, and its descriptor."""
    entries = []
    for name in BUILTIN_FILES:
        data = _data(name)
        entries += [(data["function"], descriptor) for descriptor in data["tools"]]
    return entries


class RegistryInvalid(ValueError):
    """A registry document outside the registry's JSON Schema; the message says where, never what it held."""


@functools.cache
def _registry_validator():
    from jsonschema import Draft202012Validator  # imported on first use: a cold start does not pay for it

    return Draft202012Validator(registry_schema())


def check_registry(document: Any) -> None:
    """Raise `RegistryInvalid` unless the document has the registry's shape (the first error found)."""
    from jsonschema.exceptions import best_match

    error = best_match(_registry_validator().iter_errors(document))
    if error is not None:
        # The path and the rule only: a message would repeat the value, and a value may be a caller's subject.
        where = ".".join(str(p) for p in error.absolute_path) or "the registry"
        raise RegistryInvalid(f"{where}: breaks the registry's {error.validator} rule")
