"""The model function's doors: turns (SSE), session end, agents, ListTools/CallTool.

A turn is refused with a problem before the stream starts when it can be (bad body, caller-declared
tools, an agent not granted, the tier not served, the day's tokens spent); once the stream has started,
whatever ends the turn early is an `error` event.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

from flask import Blueprint, Response, current_app, g, jsonify, stream_with_context

from agentfn.shared import app as http
from agentfn.shared import clock
from agentfn.shared.contract import ALONE
from agentfn.shared.identity import caller_required, platform_required, verify_caller
from agentfn.shared.problems import ProblemError, not_found, problem_type, unprocessable
from agentfn.shared.tool_function import LazySchema

from . import direct_calls, schemas
from .episodes import end_session
from .loop import begin
from .registry import Agent
from .services import Services
from .warm import warm_agents

bp = Blueprint("model", __name__)

# Compiled on first use or by the warm-up (importing jsonschema costs a cold start ~0.1 s).
TURN, SESSION_END, CALL, WARM, ANY_OBJECT = (
    LazySchema(s) for s in (schemas.TURN, schemas.SESSION_END, schemas.CALL, schemas.WARM, schemas.ANY_OBJECT)
)


def json_body(schema: LazySchema) -> dict:
    from agentfn.shared.validation import json_body as checked

    return checked(schema.get())


def warm() -> None:
    for schema in (TURN, SESSION_END, CALL, WARM, ANY_OBJECT):
        schema.get()


NO_AGENT = "no such agent"
NO_TOOL = "no such tool"
STILL_READING = "the engine is still reading the agent's prompt"


def services() -> Services:
    return current_app.extensions["agentfn.model"]


def refuse_caller_tools(body: dict) -> None:
    """T1: tools are the platform's; a request that adds or describes one is refused, whole."""
    found = sorted(schemas.CALLER_TOOL_KEYS & set(body))
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            found += sorted(schemas.CALLER_TOOL_MESSAGE_KEYS & set(message))
            if isinstance(message.get("role"), str) and message["role"] in schemas.CALLER_TOOL_ROLES:
                found.append(f"role {message['role']}")
    if found:
        raise unprocessable(
            f"tools are the platform's: a request cannot add or describe one ({', '.join(found)})",
            type=problem_type("caller-tools"),
        )


def conversation(schema: LazySchema) -> dict:
    body = json_body(ANY_OBJECT)
    refuse_caller_tools(body)
    schema.get().check(body)
    if body["messages"][-1]["role"] != "user":
        raise unprocessable("messages: the last message must be the person's (role user)")
    return body


def granted_agent(name: str) -> Agent:
    agent = services().registry.table().agent_for(name, g.caller)
    if agent is None:
        raise not_found(NO_AGENT)
    return agent


def sse(events: Iterator[tuple[str, dict]]) -> Iterator[str]:
    for name, data in events:
        yield f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


@bp.get("/v1/agents")
@caller_required
def list_agents():
    """The agents the caller is granted, with the tools each may call for them."""
    table = services().registry.table()
    agents = []
    for name, agent in sorted(table.agents.items()):
        tools = sorted(agent.granted_tools(g.caller))
        if tools:
            agents.append(
                {
                    "name": name,
                    "brief": agent.brief,
                    "tier": agent.tier,
                    "memory": agent.memory,
                    "tools": tools,
                    "limits": {
                        "steps": agent.steps,
                        "tokensPerTurn": agent.tokens_per_turn,
                        "deadlineSeconds": agent.deadline_seconds,
                    },
                }
            )
    return jsonify(agents=agents)


@bp.post("/v1/agents/<name>/turns")
@caller_required
def take_turn(name: str):
    """One turn of the agent, streamed as server-sent events."""
    body = conversation(TURN)
    s, agent = services(), granted_agent(name)
    try:
        turn = begin(s, g.caller, agent, body["messages"], body.get("approvals") or [])
    except ProblemError as refusal:
        if refusal.status != 429:
            raise
        response = http.problem_response(refusal)
        response.headers["Retry-After"] = str(clock.seconds_until(clock.next_midnight()))
        return response
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", "X-Generation-Id": str(turn.generation.id)}
    events = turn.events()
    if s.warming.busy(agent.name):
        # The engine is reading this agent's prompt ahead of the turns: the turn waits for it, and the caller is told.
        events = itertools.chain([("wait", {"reason": "warming", "detail": STILL_READING})], events)
    return Response(stream_with_context(sse(events)), mimetype="text/event-stream", headers=headers)


@bp.post("/v1/agents/<name>/sessions/end")
@caller_required
def end(name: str):
    """End a session: the conversation is summarised and kept as an episode; the transcript is not kept."""
    body = conversation(SESSION_END)
    agent = granted_agent(name)
    episode = end_session(services(), g.caller, agent, body["messages"], body.get("session_id"))
    return jsonify(episode=episode), 201


@bp.post("/internal/v1/engines/warm")
@platform_required
def warm_engines():
    """Warm the engines' prompt caches with the system prompt of each agent the person named by `caller` is granted,
    one agent after the other. The platform's own door (a trusted service account; a caller's token gets 403), never
    routed: each round is unmetered. The local platform asks as it starts."""
    body = json_body(WARM)
    try:
        person = verify_caller(current_app.extensions["agentfn.identity"].caller, body["caller"])
    except ProblemError as refused:
        raise unprocessable(f"caller: {refused.detail}") from None
    s = services()
    table = s.registry.table()
    agents = [agent for _, agent in sorted(table.agents.items()) if agent.granted_tools(person)]
    return jsonify(agents=warm_agents(s, person, agents))


@bp.get("/v1/tools")
@caller_required
def list_tools():
    """The reviewed reads the caller may call on their own."""
    return jsonify(tools=[t.listing() for t in direct_calls.listing(services(), g.caller, ALONE)])


@bp.post("/v1/tools/<name>/call")
@caller_required
def call_tool(name: str):
    """Call a tool on its own, as the caller: the same checks, forwarding and record as an agent's step."""
    body = json_body(CALL)
    outcome = direct_calls.call(services(), g.caller, name, body["arguments"], ALONE)
    if outcome is None:
        raise not_found(NO_TOOL)
    if outcome.ok:
        return jsonify(content=outcome.result)
    p = outcome.result
    extra = {k: v for k, v in p.items() if k in ("errors",)}
    status = p.get("status") if isinstance(p.get("status"), int) and 400 <= p["status"] <= 599 else 502
    raise ProblemError(
        status, str(p.get("title", "Tool failed")), str(p.get("detail", "")), type=str(p.get("type", "about:blank")), **extra
    )
