"""Audit: who may call what, from the registry, one row per agent, tool and channel.

    python -m agentfn_operator.audit [REGISTRY_FILE | -]     # default: $AGENTFN_REGISTRY_FILE
    kubectl get configmap agentfn-registry -o jsonpath='{.data.registry\\.json}' | python -m agentfn_operator.audit -

Columns: agent (`-` for a tool called alone or over MCP), tool, subjects, groups, channel (`step`: a
step of the agent's loop; `alone`: ListTools/CallTool; `mcp`), daily limit (`-`: none of the grant's
own), approval (a step's: `required`, the person approves each call of a tool that changes state, or
`waived` by an admin; `-` alone and over MCP, where no tool that changes state is ever offered) and the
ToolGrant that says so. The same rows follow from `kubectl get agents,toolgrants`: a Ready grant's
Agents, Subjects, Groups, Channels, Daily and Approval columns.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

HEADER = ("AGENT", "TOOL", "SUBJECTS", "GROUPS", "CHANNEL", "DAILY", "APPROVAL", "GRANT")
Row = tuple[str, str, str, str, str, str, str, str]


def _row(agent: str, tool: str, channel: str, access: Mapping[str, Any]) -> Row:
    limit = access.get("dailyLimit")
    approval = access.get("approval", "required") if channel == "step" else "-"
    return (agent, tool, ",".join(access["subjects"]) or "-", ",".join(access["groups"]) or "-", channel,
            "-" if limit is None else str(limit), approval, access["grant"])


def rows(registry: Mapping[str, Any]) -> list[Row]:
    found = [_row(agent, tool, "step", access)
             for agent, entry in registry["agents"].items() for tool, access in entry["tools"].items()]
    for channel in ("alone", "mcp"):
        found += [_row("-", tool, channel, access) for tool, access in registry[channel].items()]
    return sorted(found)


def table(found: list[Row]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *found]) for i in range(len(HEADER))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [HEADER, *found])


def records(found: list[Row]) -> list[dict[str, str]]:
    """The rows as JSON objects keyed by the lower-cased header."""
    return [dict(zip((h.lower() for h in HEADER), r, strict=True)) for r in found]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentfn_operator.audit", description=__doc__.split("\n")[0])
    parser.add_argument("registry", nargs="?", default=os.environ.get("AGENTFN_REGISTRY_FILE", "var/registry.json"),
                        help="the registry file, or - for standard input")
    parser.add_argument("--json", action="store_true", help="rows as JSON objects")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.registry == "-" else open(args.registry).read()
    found = rows(json.loads(text))
    if args.json:
        print(json.dumps(records(found), indent=2))
    else:
        print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
