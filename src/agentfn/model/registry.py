"""The registry the operator writes (the contract's `registry.schema.json`): agent -> tools -> who, and the tools
callable alone and over MCP. Read from `AGENTFN_REGISTRY_FILE` and reloaded when the file changes.

A mounted ConfigMap changes by a symlink swap and the local operator by `os.replace`, so the file is
looked at (one `stat`) at most every `RECHECK` seconds and read again when its identity, size or mtime
change. A file that does not parse or breaks the registry's JSON Schema is refused whole and the last
good table stays in force (never widen access on a half-written file); until one good file was read,
nothing is granted and readiness says so.

Who may: an access entry lets a caller in when its token's `sub` is in `subjects`, or one of its token's
groups is in `groups`; `system:authenticated` is every verified caller. An agent is granted to a caller
when at least one of its tools is (what no grant names, no caller has).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfn.shared import contract
from agentfn.shared.grants import Row, rows
from agentfn.shared.identity import Caller

log = logging.getLogger("agentfn.model.registry")

RECHECK = 0.5
EVERYONE = "system:authenticated"


@dataclass(frozen=True)
class Access:
    subjects: frozenset[str]
    groups: frozenset[str]
    daily_limit: int | None
    grant: str
    approval: str = "required"  # "waived": the agent's calls of this tool run without asking the person

    @property
    def waived(self) -> bool:
        return self.approval == "waived"

    def admits(self, caller: Caller) -> bool:
        return caller.subject in self.subjects or EVERYONE in self.groups or bool(self.groups & set(caller.groups))


@dataclass(frozen=True)
class Agent:
    name: str
    brief: str
    tier: str
    memory: str
    steps: int
    tokens_per_turn: int
    deadline_seconds: int
    tools: Mapping[str, Access]

    def granted_tools(self, caller: Caller) -> dict[str, Access]:
        return {name: access for name, access in self.tools.items() if access.admits(caller)}


@dataclass(frozen=True)
class Table:
    revision: str
    agents: Mapping[str, Agent]
    alone: Mapping[str, Access]
    mcp: Mapping[str, Access]
    rows: tuple[Row, ...] = ()  # who may call what, the rows `agentfn audit` prints (agentfn.shared.grants)

    def agent_for(self, name: str, caller: Caller) -> Agent | None:
        """The agent, if the caller is granted it; None reads the same whether it exists or not."""
        agent = self.agents.get(name)
        return agent if agent is not None and agent.granted_tools(caller) else None


EMPTY = Table("", {}, {}, {})


def _access(value: dict[str, Any]) -> Access:
    return Access(
        frozenset(value["subjects"]),
        frozenset(value["groups"]),
        value["dailyLimit"],
        value["grant"],
        value.get("approval", "required"),  # a registry from before the field: ask
    )


def _accesses(value: dict[str, Any]) -> dict[str, Access]:
    return {name: _access(access) for name, access in value.items()}


def parse(document: Any) -> Table:
    """The table of a registry document, or `RegistryInvalid` saying where it breaks the registry's JSON Schema."""
    contract.check_registry(document)
    agents = {
        name: Agent(
            name=name,
            brief=spec["brief"],
            tier=spec["tier"],
            memory=spec["memory"],
            steps=spec["limits"]["steps"],
            tokens_per_turn=spec["limits"]["tokensPerTurn"],
            deadline_seconds=spec["limits"]["deadlineSeconds"],
            tools=_accesses(spec["tools"]),
        )
        for name, spec in document["agents"].items()
    }
    return Table(
        document["revision"], agents, _accesses(document["alone"]), _accesses(document["mcp"]), tuple(rows(document))
    )


class Registry:
    """The registry file, read again when it changes; `table()` is what is in force now."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._table, self._stamp, self._checked, self.loaded = EMPTY, None, 0.0, False

    def _identity(self):
        st = os.stat(self.path)
        return st.st_ino, st.st_size, st.st_mtime_ns

    def table(self) -> Table:
        now = time.monotonic()
        if now - self._checked < RECHECK:
            return self._table
        with self._lock:
            if now - self._checked < RECHECK:
                return self._table
            try:
                stamp = self._identity()
            except OSError:
                if self.loaded:
                    log.warning("registry file unreadable; keeping the last good table", extra={"event": "registry"})
                self._checked = time.monotonic()
                return self._table
            if stamp != self._stamp:
                self._load(stamp)
            # Only now: a turn that came in while the file was being read waited for it above, rather than taking
            # the table from before (at a worker's first turns, none: "no such agent").
            self._checked = time.monotonic()
            return self._table

    def _load(self, stamp) -> None:
        try:
            with open(self.path, "rb") as f:
                table = parse(json.loads(f.read()))
        except (OSError, ValueError) as error:
            self._stamp = stamp  # do not reparse the same broken bytes every look; a new write changes the stamp
            log.error(
                "registry refused; keeping the last good table",
                extra={"event": "registry", "error_type": type(error).__name__, "where": str(error)[:200]},
            )
            return
        self._table, self._stamp, self.loaded = table, stamp, True
        log.info("registry loaded", extra={"event": "registry", "count": len(table.agents), "where": table.revision[:19]})

    def ready(self) -> bool:
        self.table()
        return self.loaded
