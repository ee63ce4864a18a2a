"""The tool table: one code path for a tool call, whether an agent's step, ListTools/CallTool or MCP (T5, T6).

A call: the tool must be one the caller is granted on that channel; its arguments are checked against
the tool's JSON Schema before anything runs (T2); a grant's daily limit is counted; then the tool runs
as the caller (T3), with a token exchanged for the part called (`agentfn.shared.exchange`): a tool
function's `POST /v1/call`, the page fetcher's `POST /v1/open`, or memory's entries for `remember` / `forget`.
Whatever happens comes back as an `ToolResult` (ok with the tool's content, or error with a problem) that a model
may see: nothing raises.

Descriptors: a tool function's comes from its `GET /v1/tool` (fetched with the first caller's token that
needs it, kept for `AGENTFN_DESCRIPTOR_TTL_SECONDS`); the page fetcher's and memory's tools are in
the contract with the operator (`agentfn.shared.contract`). `run_code`, `open_page` and the memory tools are never
alone nor on MCP, whatever a grant or a descriptor says; nor is any tool whose descriptor says it changes state
(or does not say): only a step of an agent has a person to approve it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agentfn.shared import contract, telemetry
from agentfn.shared.contract import ALONE, MEMORY_TOOLS, NEVER_ALONE_OR_MCP, builtin_tools
from agentfn.shared.exchange import ExchangeFailed, TokenExchange
from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError, problem_type
from agentfn.shared.tool_function import changes_state, check_descriptor

from .parts_http import Http, Unreachable
from .registry import Access, Agent
from .store import today

log = logging.getLogger("agentfn.model.tool_table")

PAGE_AUDIT_BATCH = 64  # generation ids per question to the page fetcher's audit (what its request line holds)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    callable_alone: bool
    mcp: bool
    via: str  # "function" | "page" | "memory"
    changes_state: bool = True  # a call changes state or spends quota: the person approves it (unless waived)

    def listing(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass
class ToolResult:
    ok: bool
    result: Any  # the tool's content, or a problem (type, title, status, detail)
    ms: float = 0.0  # time in the tool itself (the HTTP call), for the record and the benchmark

    @property
    def status(self) -> str:
        return "ok" if self.ok else "error"


@contextmanager
def executed(name: str, channel: str, step: int | None = None) -> Iterator[Callable[[ToolResult], None]]:
    """One tool execution as telemetry sees it: the `execute_tool {tool}` span (current for the call, so the part
    called joins the trace) and its duration; the block hands its outcome to the function it is given."""
    began = time.perf_counter()
    common = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    span = telemetry.start(
        f"execute_tool {name}", {**common, "gen_ai.tool.type": "function", "agentfn.channel": channel, "agentfn.step": step}
    )
    token = telemetry.attach(span)
    failed: list[str | None] = [None]

    def done(outcome: ToolResult) -> None:
        if not outcome.ok:
            result = outcome.result if isinstance(outcome.result, dict) else {}
            failed[0] = telemetry.error_type(result.get("type"), result.get("status"))
            span.fail(failed[0])
        span.attrs({"agentfn.status": outcome.status})

    try:
        yield done
    finally:
        telemetry.detach(token)
        span.end()
        telemetry.record(
            "gen_ai.client.operation.duration",
            time.perf_counter() - began,
            {**common, "agentfn.channel": channel, "error.type": failed[0]},
        )


def problem(status: int, title: str, detail: str = "", kind: str = "tool-error") -> dict[str, Any]:
    out = {"type": problem_type(kind), "title": title, "status": status}
    if detail:
        out["detail"] = detail
    return out


@dataclass
class CallContext:
    """Who calls, through what, and what the turn showed (forget takes only an id shown in this turn)."""

    caller: Caller
    channel: str  # step, alone or mcp (agentfn.shared.contract.CHANNELS)
    access: Access
    deadline: float  # time.monotonic() by which the call must be over
    agent: Agent | None = None
    shown_ids: frozenset[str] = field(default_factory=frozenset)
    step: tuple[str, int] | None = None  # the turn's generation and this step's n: the page fetcher's audit keeps them


def _builtins() -> dict[str, Tool]:
    out = {}
    for function, d in builtin_tools():
        out[d["name"]] = Tool(d["name"], d["description"], d["input_schema"], False, False, function, changes_state(d))
    return out


class Schemas:
    """Compiled JSON Schemas by (tool, memory mode); jsonschema is imported on first use (cold starts)."""

    def __init__(self):
        self._compiled: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def check(self, tool: Tool, schema: dict[str, Any], arguments: Any) -> None:
        key = (tool.name, json.dumps(schema, sort_keys=True))
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                from agentfn.shared.validation import Schema

                compiled = self._compiled[key] = Schema(schema)
        compiled.check(arguments)


class ToolTable:
    def __init__(
        self,
        *,
        tool_urls: Mapping[str, str],
        page_url: str | None,
        memory_url: str | None,
        store,
        timeout: float,
        result_chars: int,
        descriptor_ttl: float,
        http: Http | None = None,
        tokens: TokenExchange | None = None,
        audiences: Mapping[str, str] | None = None,
    ):
        self.tool_urls = {name: url.rstrip("/") for name, url in tool_urls.items()}
        # Whom each call is for: a tool's name, or "page" / "memory" for the built-in ones (see `audience`).
        self.tokens = tokens or TokenExchange(mode="raw", url="", token_file="")
        self.audiences = dict(audiences or {})
        self.page_url, self.memory_url = (page_url or "").rstrip("/"), (memory_url or "").rstrip("/")
        self.store, self.timeout, self.result_chars, self.ttl = store, timeout, result_chars, descriptor_ttl
        self.http = http or Http()
        self.builtins = _builtins()
        self.schemas = Schemas()
        self._cache: dict[str, tuple[Tool, float]] = {}
        self._lock = threading.Lock()

    # --- descriptors ---------------------------------------------------------------------------------

    def descriptor(self, name: str, caller: Caller, deadline: float | None = None) -> Tool | None:
        """The tool's descriptor, or None when no part serves it now (unknown, unconfigured, not answering)."""
        if name in self.builtins:
            served = self.memory_url if name in MEMORY_TOOLS else self.page_url
            return self.builtins[name] if served else None
        url = self.tool_urls.get(name)
        if url is None:
            return None
        with self._lock:
            cached = self._cache.get(name)
        if cached and time.monotonic() - cached[1] < self.ttl:
            return cached[0]
        timeout = 3.0 if deadline is None else min(3.0, deadline - time.monotonic())
        try:
            token = self.tokens.token_for(caller, self.audience(name), timeout)
            answer = self.http.request("GET", url + "/v1/tool", token=token, timeout=timeout)
            descriptor = check_descriptor(answer.body) if answer.status == 200 else None
        except (Unreachable, ValueError, ExchangeFailed):
            descriptor = None
        if descriptor is None or descriptor["name"] != name:
            log.warning("tool descriptor unavailable", extra={"event": "descriptor", "where": name})
            return cached[0] if cached else None  # a stale descriptor beats none while the function restarts
        tool = Tool(
            name,
            descriptor["description"],
            descriptor["input_schema"],
            descriptor["callable_alone"],
            descriptor["mcp"],
            "function",
            changes_state(descriptor),
        )
        with self._lock:
            self._cache[name] = (tool, time.monotonic())
        return tool

    def for_agent(self, agent: Agent, caller: Caller, deadline: float) -> dict[str, tuple[Tool, Access]]:
        """The tools the agent may call as a step for this caller, as the model is shown them."""
        out = {}
        for name, access in agent.granted_tools(caller).items():
            if name in MEMORY_TOOLS and agent.memory == "none":
                continue
            tool = self.descriptor(name, caller, deadline)
            if tool is not None:
                out[name] = (self.narrowed(tool, agent), access)
        return out

    def listable(self, grants: Mapping[str, Access], caller: Caller, channel: str) -> dict[str, tuple[Tool, Access]]:
        """The reviewed reads the caller may call on their own (`alone`) or over MCP (`mcp`)."""
        out = {}
        for name, access in sorted(grants.items()):
            if name in NEVER_ALONE_OR_MCP or not access.admits(caller):
                continue
            tool = self.descriptor(name, caller)
            if tool is None or not (tool.callable_alone if channel == ALONE else tool.mcp):
                continue
            if tool.changes_state:
                continue  # no one approves a call alone or over MCP: what changes state (or does not say) is not there
            out[name] = (tool, access)
        return out

    @staticmethod
    def narrowed(tool: Tool, agent: Agent | None) -> Tool:
        """`remember` for an agent that keeps preferences only may keep only preferences."""
        if tool.name != "remember" or agent is None or agent.memory != "preferences":
            return tool
        schema = json.loads(json.dumps(tool.input_schema))
        schema["properties"]["kind"]["enum"] = ["preference"]
        return Tool(tool.name, tool.description, schema, False, False, tool.via, tool.changes_state)

    # --- the call ------------------------------------------------------------------------------------

    def invalid(self, tool: Tool, arguments: Any) -> dict[str, Any] | None:
        """The problem with these arguments (checked against the tool's JSON Schema), or None."""
        try:
            self.schemas.check(tool, tool.input_schema, arguments)
        except ProblemError as invalid:
            return {**invalid.to_dict(), "type": problem_type("invalid-arguments")}
        return None

    def call(self, tool: Tool, arguments: Any, ctx: CallContext) -> ToolResult:
        """Check, count and run one call as the caller. The one path for every channel."""
        invalid = self.invalid(tool, arguments)
        if invalid is not None:
            return ToolResult(False, invalid)
        if ctx.access.daily_limit is not None and not self.store.count_call(
            ctx.caller.subject, ctx.access.grant or tool.name, ctx.access.daily_limit, today()
        ):
            return ToolResult(
                False,
                problem(
                    429,
                    "Daily limit reached",
                    f"{tool.name} may be called {ctx.access.daily_limit} times a day",
                    "daily-limit",
                ),
            )
        timeout = min(self.timeout, ctx.deadline - time.monotonic())
        if timeout <= 0:
            return ToolResult(False, problem(504, "Deadline", "the turn's deadline passed before the tool ran", "deadline"))
        started = time.perf_counter()
        try:
            if tool.via == "function":
                answer = self.http.request(
                    "POST",
                    self.tool_urls[tool.name] + "/v1/call",
                    token=self.token(ctx, tool.name, timeout),
                    timeout=timeout,
                    body={"arguments": arguments},
                )
                outcome = self._content(answer, tool.name)
            elif tool.via == "page":
                body = {**arguments, "step": {"generation_id": ctx.step[0], "n": ctx.step[1]}} if ctx.step else arguments
                answer = self.http.request(
                    "POST", self.page_url + "/v1/open", token=self.token(ctx, "page", timeout), timeout=timeout, body=body
                )
                outcome = (
                    ToolResult(True, answer.body)
                    if answer.status == 200
                    else ToolResult(False, answer.problem("the page fetcher"))
                )
            else:
                outcome = self._memory(tool.name, arguments, ctx, timeout)
        except Unreachable as error:
            outcome = ToolResult(
                False,
                problem(504, "Timeout", f"{tool.name} did not answer within {timeout:.1f} s", "timeout")
                if error.timeout
                else problem(502, "Unreachable", f"{tool.name} is not answering", "unreachable"),
            )
        except ExchangeFailed as failed:
            outcome = ToolResult(False, failed.to_dict())
        outcome.ms = (time.perf_counter() - started) * 1000
        return outcome

    def page_fetches(self, caller: Caller, generations: list[str], timeout: float) -> list[dict] | None:
        """For an admin: the page fetcher's audit rows of these generations (host, size, outcome), or None when
        it cannot say (not configured, not answering, refusing)."""
        if not self.page_url or not generations:
            return None
        found = []
        try:
            token = self.tokens.token_for(caller, self.audience("page"), timeout)
            for start in range(0, len(generations), PAGE_AUDIT_BATCH):
                query = "&".join(f"generation_id={g}" for g in generations[start : start + PAGE_AUDIT_BATCH])
                answer = self.http.request("GET", f"{self.page_url}/v1/audit?{query}", token=token, timeout=timeout)
                fetches = answer.body.get("fetches") if answer.status == 200 and isinstance(answer.body, dict) else None
                if not isinstance(fetches, list):
                    return None
                found += fetches
        except (Unreachable, ExchangeFailed):
            return None
        return found

    def audience(self, part: str) -> str:
        """The audience of a token for `part`: a tool's name, "page" or "memory" (unless set, the contract's)."""
        if part in self.audiences:
            return self.audiences[part]
        return contract.audience(part) if part in contract.SINGLE_AUDIENCES else contract.audience("tool", part)

    def token(self, ctx: CallContext, part: str, timeout: float, *, fresh: bool = False) -> str:
        """The caller's token exchanged for `part` (raises `ExchangeFailed`, an outcome of the call); `fresh`: for
        this call alone."""
        return self.tokens.token_for(ctx.caller, self.audience(part), timeout, fresh=fresh)

    def _content(self, answer, name: str) -> ToolResult:
        if answer.status == 200 and isinstance(answer.body, dict) and "content" in answer.body:
            return ToolResult(True, answer.body["content"])
        if answer.status == 200:
            return ToolResult(False, problem(502, "Outside the contract", f"{name} answered without content"))
        return ToolResult(False, answer.problem(name))

    def _memory(self, name: str, arguments: dict, ctx: CallContext, timeout: float) -> ToolResult:
        # Each write and each forget gets a token of its own: memory lets an exchanged token keep one note and forget
        # one entry, and the kept token (recall's) may already have done either in an earlier turn.
        if name == "remember":
            body = {
                "kind": arguments["kind"],
                "text": arguments["text"],
                "source": f"agent:{ctx.agent.name}" if ctx.agent else "agent",
            }
            answer = self.http.request(
                "POST",
                self.memory_url + "/v1/entries",
                token=self.token(ctx, "memory", timeout, fresh=True),
                timeout=timeout,
                body=body,
            )
            # 201: a new entry; 200: the subject already had this note (folded equal): memory answers with it.
            if answer.status in (200, 201) and isinstance(answer.body, dict):
                kept = {k: answer.body.get(k) for k in ("id", "kind", "text")}
                return ToolResult(True, {**kept, "existing": bool(answer.body.get("existing", answer.status == 200))})
            return ToolResult(False, answer.problem("memory"))
        entry_id = arguments["id"]
        if entry_id not in ctx.shown_ids:
            return ToolResult(
                False, problem(404, "Not shown", "forget takes the id of a note shown in this turn", "not-shown")
            )
        answer = self.http.request(
            "DELETE",
            f"{self.memory_url}/v1/entries/{entry_id}",
            token=self.token(ctx, "memory", timeout, fresh=True),
            timeout=timeout,
        )
        if answer.status == 204:
            return ToolResult(True, {"forgotten": entry_id})
        return ToolResult(False, answer.problem("memory"))

    def for_model(self, outcome: ToolResult, already_done: int | None = None) -> str:
        """What the model reads of an outcome: its JSON, cut to the configured size; a repeat is marked as
        already done (by the step that made the call), with that step's result."""
        mark = {} if already_done is None else {"already_done": True, "step": already_done}
        text = json.dumps(
            {"ok": outcome.ok, **mark, ("content" if outcome.ok else "error"): outcome.result}, ensure_ascii=False
        )
        return text if len(text) <= self.result_chars else text[: self.result_chars] + " …(cut)"
