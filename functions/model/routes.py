"""The model function's doors: turns (SSE), session end, agents, ListTools/CallTool.

A turn is refused with a problem before the stream starts when it can be (bad body, caller-declared
tools, an agent not granted, the tier not served, the day's tokens spent); once the stream has started,
whatever ends the turn early is an `error` event.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator

from agentfn.shared import app as http
from agentfn.shared import telemetry
from agentfn.shared.identity import caller_required
from agentfn.shared.problems import ProblemError, not_found, unprocessable
from agentfn.shared.tools import LazySchema
from flask import Blueprint, Response, current_app, g, jsonify, stream_with_context

from . import calls, prompt, schemas
from .approvals import Approval, refused
from .episodes import end_session
from .loop import Turn, budget_problem
from .registry import Agent
from .services import Services
from .store import today

bp = Blueprint("model", __name__)

# Compiled on first use or by the warm-up (importing jsonschema costs a cold start ~0.1 s).
TURN, SESSION_END, CALL, ANY_OBJECT = (
    LazySchema(s) for s in (schemas.TURN, schemas.SESSION_END, schemas.CALL, schemas.ANY_OBJECT)
)


def json_body(schema: LazySchema) -> dict:
    from agentfn.shared.validation import json_body as checked

    return checked(schema.get())


def warm() -> None:
    for schema in (TURN, SESSION_END, CALL, ANY_OBJECT):
        schema.get()


NO_AGENT = "no such agent"
NO_TOOL = "no such tool"
TOOL_OVERHEAD = 600  # tokens the tool list and instructions may add to the first round's prompt


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
            type="https://agentfn.dev/problems/caller-tools",
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


def seconds_to_midnight() -> int:
    now = datetime.datetime.now(datetime.UTC)
    return (
        int(
            (
                datetime.datetime.combine(now.date() + datetime.timedelta(days=1), datetime.time(), datetime.UTC) - now
            ).total_seconds()
        )
        + 1
    )


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
    s, caller = services(), g.caller
    agent = granted_agent(name)
    tier = s.tier(agent.tier)
    seconds = min(tier.deadline, agent.deadline_seconds)
    deadline, day = time.monotonic() + seconds, today()
    messages = body["messages"]
    if prompt.likely(messages[-1]["content"]) > tier.context_tokens - tier.max_tokens - TOOL_OVERHEAD:
        raise ProblemError(413, "Content Too Large", "the last message does not fit the tier's context")
    approvals = checked_approvals(s, agent, body.get("approvals") or [])
    generation = s.store.open(
        kind="turn",
        channel="agent",
        subject=caller.subject,
        agent=agent.name,
        tier=tier.name,
        hold_seconds=seconds + 30,
        day=day,
    )
    # The first round's hold, taken before the stream so that a spent day is a plain 429.
    # The day is held at a bound on what the engine may count; the agent's tokens per turn checked at the likely count.
    fitted, overhead = prompt.fit(messages, tier.context_tokens), TOOL_OVERHEAD
    if agent.memory != "none":
        overhead += s.limits.recall_max_tokens
    cost = prompt.estimate(fitted) + prompt.estimate(agent.brief) + overhead
    completion = min(tier.max_tokens, agent.tokens_per_turn - prompt.likely(fitted) - prompt.likely(agent.brief) - overhead)
    least = cost + s.limits.min_completion
    turn_fits = completion >= s.limits.min_completion
    held = (
        s.store.round(generation, caller.subject, day, limit=s.limits.daily_tokens, want=cost + completion, least=least)
        if turn_fits
        else 0
    )
    if not held:
        s.store.finish(generation, caller.subject, day, status="budget", problem=429, step_log=[], duration_ms=0)
        telemetry.record("agentfn.turns", 1, {"gen_ai.agent.name": agent.name, "agentfn.outcome": "budget"})
        telemetry.record(
            "agentfn.budget.refusals",
            1,
            {"gen_ai.agent.name": agent.name, "agentfn.limit": "turn-tokens" if not turn_fits else "daily-tokens"},
        )
        response = http.problem_response(budget_problem(per_turn=not turn_fits))
        response.headers["Retry-After"] = str(seconds_to_midnight())
        return response
    if approvals and not s.store.use_approvals(caller.subject, [(a.jti, a.expires) for a in approvals]):
        s.store.finish(generation, caller.subject, day, status="error", problem=409, step_log=[], duration_ms=0)
        raise refused(409, "approval-used", "an approval in the request was used before; each is good once")
    turn = Turn(
        s, caller, agent, tier, messages, generation, day, deadline, held, approvals=approvals, parent=telemetry.current()
    )
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", "X-Generation-Id": str(generation)}
    return Response(stream_with_context(sse(turn.events())), mimetype="text/event-stream", headers=headers)


def checked_approvals(s: Services, agent: Agent, items: list[dict]) -> list[Approval]:
    """Every approval checked before anything of the turn runs (its use comes after the budget's hold)."""
    approvals = s.approvals.check(g.caller, agent.name, items)
    granted = agent.granted_tools(g.caller)
    for i, approval in enumerate(approvals):
        if approval.tool not in granted:
            raise refused(403, "approval-not-granted", f"approvals[{i}]: the agent is no longer granted {approval.tool}")
    if len(approvals) > agent.steps:
        raise refused(422, "approvals-too-many", f"the agent takes at most {agent.steps} steps in a turn")
    return approvals


@bp.post("/v1/agents/<name>/sessions/end")
@caller_required
def end(name: str):
    """End a session: the conversation is summarised and kept as an episode; the transcript is not kept."""
    body = conversation(SESSION_END)
    agent = granted_agent(name)
    episode = end_session(services(), g.caller, agent, body["messages"], body.get("session_id"))
    return jsonify(episode=episode), 201


@bp.get("/v1/tools")
@caller_required
def list_tools():
    """The reviewed reads the caller may call on their own."""
    return jsonify(tools=[t.listing() for t in calls.listing(services(), g.caller, "alone")])


@bp.post("/v1/tools/<name>/call")
@caller_required
def call_tool(name: str):
    """Call a tool on its own, as the caller: the same checks, forwarding and record as an agent's step."""
    body = json_body(CALL)
    outcome = calls.call(services(), g.caller, name, body["arguments"], "alone")
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
