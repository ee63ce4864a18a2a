"""Warming an engine's prompt cache with the system prompt of an agent's turns, before the first turn needs it.

The door (`POST /internal/v1/engines/warm`) is the platform's own, never a caller's: each warm-up is an unmetered round
of the engine, so only a service account the model function trusts (`AGENTFN_TRUSTED_SERVICE_ACCOUNTS`, with a token of
its service audience) may ask; a caller's token is refused with 403. The local platform asks as it starts, naming the
person whose turns to warm by their token in the body: for each agent that person is granted, the engine reads the
prompt and tool listing their turns with the agent open with, so the first turn reads only what is new. At most one
warm-up runs per agent at a time; a second asked meanwhile joins the first. The chart trusts no account here: in a
cluster nothing warms, and no one may.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError

from .engines import DeadlinePassed, EngineFailed
from .loop import MAX_CALLS, opening
from .registry import Agent
from .services import Services
from .store import today

log = logging.getLogger("agentfn.model.turn")

WARM_SECONDS = 300  # the bound on warming an engine's prompt cache with one agent's system prompt


def warm_agents(s: Services, caller: Caller, agents: list[Agent]) -> list[dict[str, Any]]:
    """Each agent warmed for the caller, one after the other; an agent already being warmed is joined, not read again."""
    return [s.warming.once(agent.name, lambda agent=agent: warm(s, caller, agent), WARM_SECONDS + 60) for agent in agents]


def warm(s: Services, caller: Caller, agent: Agent) -> dict[str, Any]:
    """One round that has the agent's engine read the system prompt and tool listing of the caller's turns with the
    agent, and write one token: its prompt cache then holds them, and the caller's first turn reads only what is new
    (on a small CPU engine, seconds instead of most of a minute). Not a turn: nothing recorded, nothing of the
    caller's day spent; the local platform asks once, as it starts."""
    began = time.perf_counter()
    outcome: dict[str, Any] = {"agent": agent.name, "ok": False}
    try:
        tier = s.tier(agent.tier)
        # Longer than a turn may take: a busy 2-core machine reads a 900-token prompt in up to a minute and a half,
        # and a round cut short leaves nothing in the cache.
        deadline = time.monotonic() + max(tier.deadline, WARM_SECONDS)
        tools, system = opening(s, caller, agent, tier, deadline, today().isoformat())
        # What the first round offers (the listing is part of the prompt in native mode); any message after the prompt.
        offer = [t for t, _ in tools.values()] if tools and min(MAX_CALLS, agent.steps) > 0 else None
        convo = [{"role": "system", "content": system}, {"role": "user", "content": "Hello."}]
        try:
            with s.warming.reading(tier.name, system):
                for _ in s.engine(tier).round(convo, offer, 1, deadline):
                    pass
        except EngineFailed as cut:
            if cut.kind != "malformed":
                raise
            # One token of a constrained reply is no whole JSON reply, but the engine wrote it: it read the prompt.
        outcome["ok"] = True
    except (EngineFailed, DeadlinePassed) as error:
        outcome["failed"] = error.kind if isinstance(error, EngineFailed) else "deadline"
    except ProblemError as error:
        outcome["failed"] = error.title
    outcome["ms"] = round((time.perf_counter() - began) * 1000, 1)
    log.info(
        "engine warmed",
        extra={"event": "warm", "agent": agent.name, "outcome": outcome.get("failed", "ok"), "ms": outcome["ms"]},
    )
    return outcome
