"""Who may call what, as rows: one per agent, tool and channel, from a registry document (contract/registry.schema.json).

The one place the rows are built: `agentfn audit` prints them (from a registry file, standard input or the
ConfigMap), the operator's `python -m agentfn.operator.audit` too, and the model function's admin door
`GET /v1/admin/grants` serves them from the registry it reads.

Columns: agent (`-` for a tool called alone or over MCP), tool, subjects, groups, channel (`step`: a
step of the agent's loop; `alone`: ListTools/CallTool; `mcp`), daily limit (`-`: none of the grant's
own), approval (a step's: `required`, the person approves each call of a tool that changes state, or
`waived` by an admin; `-` alone and over MCP, where no tool that changes state is ever offered) and the
ToolGrant that says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .contract import ALONE, MCP, STEP

HEADER = ("AGENT", "TOOL", "SUBJECTS", "GROUPS", "CHANNEL", "DAILY", "APPROVAL", "GRANT")
Row = tuple[str, str, str, str, str, str, str, str]


def _row(agent: str, tool: str, channel: str, access: Mapping[str, Any]) -> Row:
    limit = access.get("dailyLimit")
    approval = access.get("approval", "required") if channel == STEP else "-"
    return (
        agent,
        tool,
        ",".join(access.get("subjects") or []) or "-",
        ",".join(access.get("groups") or []) or "-",
        channel,
        "-" if limit is None else str(limit),
        approval,
        str(access.get("grant") or "-"),
    )


def rows(registry: Mapping[str, Any]) -> list[Row]:
    found = [
        _row(agent, tool, STEP, access)
        for agent, entry in registry["agents"].items()
        for tool, access in entry["tools"].items()
    ]
    for channel in (ALONE, MCP):
        found += [_row("-", tool, channel, access) for tool, access in registry[channel].items()]
    return sorted(found)


def table(found: list[Row]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *found]) for i in range(len(HEADER))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [HEADER, *found])


def records(found: list[Row]) -> list[dict[str, str]]:
    """The rows as JSON objects keyed by the lower-cased header."""
    return [dict(zip((h.lower() for h in HEADER), r, strict=True)) for r in found]
