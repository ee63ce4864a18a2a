"""What the doors share in one process: the registry, the store, the tool table, the engines, memory."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agentfn.shared.problems import ProblemError, problem_type

from .approvals import Approvals
from .engines import Engine, Tier
from .memory_client import MemoryClient
from .registry import Registry
from .store import Store
from .tool_table import ToolTable


@dataclass
class TurnLimits:
    """What bounds a turn (from the settings): the caller's daily tokens, what recall brings, the least completion
    worth a round; and the tier that writes episodes."""

    daily_tokens: int
    recall_limit: int
    recall_max_tokens: int
    episode_tier: str
    min_completion: int = 16  # a round that could write fewer tokens than this is not worth running


@dataclass
class Flight:
    """One agent's warm-up under way, and what came of it once done."""

    done: threading.Event = field(default_factory=threading.Event)
    outcome: dict[str, Any] | None = None


class Warming:
    """The system prompts an engine is reading ahead of the turns (warm.py), by tier and prompt: a turn with the same
    prompt waits for that read to end, then reads only what is new, instead of reading the prompt again beside it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reading: dict[tuple[str, str], threading.Event] = {}
        self._agents: dict[str, Flight] = {}  # the warm-up running for each agent

    def once(self, agent: str, run: Callable[[], dict[str, Any]], timeout: float) -> dict[str, Any]:
        """At most one warm-up per agent at a time: a second asked meanwhile joins the first and answers with its
        outcome (marked `joined`), rather than have the engine read the same prompt twice."""
        with self._lock:
            flight = self._agents.get(agent)
            leading = flight is None
            if leading:
                flight = self._agents[agent] = Flight()
        if not leading:
            if not flight.done.wait(max(timeout, 0)):
                return {"agent": agent, "ok": False, "failed": "deadline", "joined": True, "ms": 0.0}
            return {**(flight.outcome or {"agent": agent, "ok": False, "failed": "failed", "ms": 0.0}), "joined": True}
        try:
            flight.outcome = run()
            return flight.outcome
        finally:
            flight.done.set()
            with self._lock:
                del self._agents[agent]

    def busy(self, agent: str) -> bool:
        """Whether a warm-up for this agent is running (its turns are told they wait for it)."""
        with self._lock:
            return agent in self._agents

    @contextmanager
    def reading(self, tier: str, system: str) -> Iterator[None]:
        done = threading.Event()
        with self._lock:
            self._reading[(tier, system)] = done
        try:
            yield
        finally:
            done.set()
            with self._lock:
                if self._reading.get((tier, system)) is done:
                    del self._reading[(tier, system)]

    def wait(self, tier: str, system: str, timeout: float) -> None:
        with self._lock:
            done = self._reading.get((tier, system))
        if done is not None:
            done.wait(max(timeout, 0))


@dataclass
class Services:
    registry: Registry
    store: Store
    tools: ToolTable
    tiers: dict[str, Tier]
    memory: MemoryClient
    limits: TurnLimits
    approvals: Approvals = field(default_factory=lambda: Approvals(None, 300))
    warming: Warming = field(default_factory=Warming)
    # What builds a tier's engine: the OpenAI-compatible client, or a test's stand-in for it (create_app's `engines`).
    make_engine: Callable[[Tier], Engine] = Engine
    _engines: dict[str, Engine] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def tier(self, name: str) -> Tier:
        tier = self.tiers.get(name)
        if tier is None:
            raise ProblemError(503, "Service Unavailable", f"the tier {name} is not served here", type=problem_type("tier"))
        return tier

    def engine(self, tier: Tier) -> Engine:
        with self._lock:
            engine = self._engines.get(tier.name)
            if engine is None:
                engine = self._engines[tier.name] = self.make_engine(tier)
            return engine

    def warm(self) -> None:
        """Import and build what the first turn needs, off the path to ready (scale-to-zero cold starts)."""
        for tier in self.tiers.values():
            self.engine(tier)
