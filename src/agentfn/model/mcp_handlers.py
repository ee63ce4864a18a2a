"""The MCP handlers of `/mcp`: ListTools and CallTool, module-level as the MCP SDK's examples write them.

They read the loop's own tool table (`direct_calls.listing` / `direct_calls.call`) from the server's lifespan
context (the model function's `Services`): no second table, so a tool reads the same in an agent step, in the
record and to an MCP client. Each runs as the caller of the request's bearer token, which `CallerTokens` checked. This module
imports the SDK; `mcp_server.build` imports it on first use, never on the way to ready.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from agentfn.shared.contract import MCP
from agentfn.shared.identity import Caller, Verifier, verify_caller
from agentfn.shared.problems import ProblemError

from . import direct_calls
from .services import Services

log = logging.getLogger("agentfn.model.mcp")


def serving(services: Services):
    """The server's lifespan: its context is the model function's services, which every handler reads."""

    @asynccontextmanager
    async def lifespan(_server) -> AsyncIterator[Services]:
        yield services

    return lifespan


class CallerTokens:
    """TokenVerifier: the caller JWT check of every door (signature, iss, aud = the resource, exp), off the loop."""

    def __init__(self, verifier: Verifier):
        self.verifier = verifier

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            caller = await anyio.to_thread.run_sync(verify_caller, self.verifier, token)
        except ProblemError:
            return None
        return AccessToken(
            token=token, client_id=caller.subject, scopes=[], subject=caller.subject, claims={"groups": list(caller.groups)}
        )


def caller() -> Caller:
    """The caller of this request, as `CallerTokens` verified its token."""
    access = get_access_token()
    if access is None or access.subject is None:  # the SDK's RequireAuthMiddleware let nobody else in
        raise MCPError(-32001, "no valid caller token")
    return Caller(access.subject, tuple((access.claims or {}).get("groups", [])), access.token)


async def list_tools(
    ctx: ServerRequestContext[Services], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    who = caller()
    tools = await anyio.to_thread.run_sync(direct_calls.listing, ctx.lifespan_context, who, MCP)
    return types.ListToolsResult(
        tools=[types.Tool(name=t.name, description=t.description, input_schema=t.input_schema) for t in tools]
    )


async def call_tool(ctx: ServerRequestContext[Services], params: types.CallToolRequestParams) -> types.CallToolResult:
    who = caller()
    arguments = params.arguments or {}
    try:
        outcome = await anyio.to_thread.run_sync(direct_calls.call, ctx.lifespan_context, who, params.name, arguments, MCP)
    except Exception as error:  # never let an exception's message travel or be logged
        log.error("mcp call failed", extra={"event": "mcp", "error_type": type(error).__name__})
        raise MCPError(-32603, "the call failed") from None
    if outcome is None:
        raise MCPError(types.INVALID_PARAMS, f"no such tool: {params.name[:64]}")
    text = json.dumps(outcome.result, ensure_ascii=False)
    structured = outcome.result if outcome.ok and isinstance(outcome.result, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured, is_error=not outcome.ok
    )
