"""What the doors share in one process: the registry, the store, the tool table, the engines, memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from agentfn.shared.problems import ProblemError, problem_type

from .approvals import Approvals
from .engines import Engine, Tier
from .memory_client import MemoryClient
from .registry import Registry
from .store import Store
from .tools import ToolTable


@dataclass
class Limits:
    daily_tokens: int
    recall_limit: int
    recall_max_tokens: int
    episode_tier: str
    min_completion: int = 16  # a round that could write fewer tokens than this is not worth running


@dataclass
class Services:
    registry: Registry
    store: Store
    tools: ToolTable
    tiers: dict[str, Tier]
    memory: MemoryClient
    limits: Limits
    approvals: Approvals = field(default_factory=lambda: Approvals(None, 300))
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
                engine = self._engines[tier.name] = Engine(tier)
            return engine

    def warm(self) -> None:
        """Import and build what the first turn needs, off the path to ready (scale-to-zero cold starts)."""
        for tier in self.tiers.values():
            self.engine(tier)
