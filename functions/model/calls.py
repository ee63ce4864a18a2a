"""CallTool and ListTools for a caller on their own (`alone`) or over MCP (`mcp`), through the loop's table.

The same `ToolTable.call` as an agent's step (same validation, forwarding and grant counting), and the
same record: one generation row of kind `tool_call` with its one step's name, status and ms.
"""

from __future__ import annotations

import time
from typing import Any

from agentfn.shared.identity import Caller

from .services import Services
from .store import today
from .tools import CallContext, Outcome, Tool, executed


def grants(services: Services, channel: str):
    table = services.registry.table()
    return table.alone if channel == "alone" else table.mcp


def listing(services: Services, caller: Caller, channel: str) -> list[Tool]:
    return [tool for tool, _ in services.tools.listable(grants(services, channel), caller, channel).values()]


def call(services: Services, caller: Caller, name: str, arguments: Any, channel: str) -> Outcome | None:
    """The outcome of one call, or None when the caller has no such tool on this channel (a 404)."""
    found = services.tools.listable({k: v for k, v in grants(services, channel).items() if k == name}, caller, channel)
    if name not in found:
        return None
    tool, access = found[name]
    timeout = services.tools.timeout
    day, started = today(), time.perf_counter()
    gen = services.store.open(
        kind="tool_call", channel=channel, subject=caller.subject, agent=None, tier=None, hold_seconds=timeout, day=day
    )
    outcome = None
    try:
        with executed(name, channel) as done:
            outcome = services.tools.call(tool, arguments, CallContext(caller, channel, access, time.monotonic() + timeout))
            done(outcome)
        return outcome
    finally:
        status = outcome.status if outcome else "error"
        code = None if outcome is None or outcome.ok else outcome.result.get("status")
        services.store.finish(
            gen,
            caller.subject,
            day,
            status=status,
            problem=code,
            step_log=[{"tool": name, "status": status, "ms": round(outcome.ms, 1) if outcome else 0, "grant": access.grant}],
            duration_ms=int((time.perf_counter() - started) * 1000),
        )
