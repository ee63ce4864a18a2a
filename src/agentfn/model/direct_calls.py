"""A caller's direct calls, with no agent between: CallTool and ListTools on their own (`alone`, the `/v1/tools`
doors) or over MCP (`mcp`, `mcp_handlers`), through the loop's tool table (`tool_table`).

The same `ToolTable.call` as an agent's step (same validation, forwarding and grant counting), and the
same record: one generation row of kind `tool_call` with its one step's name, status and ms.
"""

from __future__ import annotations

import time
from typing import Any

from agentfn.shared.contract import ALONE
from agentfn.shared.identity import Caller

from .generation import Generation
from .services import Services
from .tool_table import CallContext, Tool, ToolResult, executed


def grants(services: Services, channel: str):
    table = services.registry.table()
    return table.alone if channel == ALONE else table.mcp


def listing(services: Services, caller: Caller, channel: str) -> list[Tool]:
    return [tool for tool, _ in services.tools.listable(grants(services, channel), caller, channel).values()]


def call(services: Services, caller: Caller, name: str, arguments: Any, channel: str) -> ToolResult | None:
    """The result of one call, or None when the caller has no such tool on this channel (a 404)."""
    found = services.tools.listable({k: v for k, v in grants(services, channel).items() if k == name}, caller, channel)
    if name not in found:
        return None
    tool, access = found[name]
    timeout = services.tools.timeout
    with Generation(
        services.store, kind="tool_call", channel=channel, subject=caller.subject, hold_seconds=timeout
    ) as generation:
        outcome = None
        try:
            with executed(name, channel) as done:
                outcome = services.tools.call(
                    tool, arguments, CallContext(caller, channel, access, time.monotonic() + timeout)
                )
                done(outcome)
        finally:
            status, ms = (outcome.status, round(outcome.ms, 1)) if outcome else ("error", 0)
            generation.step_log.append({"tool": name, "status": status, "ms": ms, "grant": access.grant})
        if not outcome.ok:
            generation.ended("error", outcome.result.get("status"))
        return outcome
