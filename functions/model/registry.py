"""The registry the operator writes (operator/registry.schema.json): agent -> tools -> who, and the tools
callable alone and over MCP. Read from `AGENTFN_REGISTRY_FILE` and reloaded when the file changes.

A mounted ConfigMap changes by a symlink swap and the local operator by `os.replace`, so the file is
looked at (one `stat`) at most every `RECHECK` seconds and read again when its identity, size or mtime
change. A file that does not parse or does not have the registry's shape is refused whole and the last
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
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfn.shared.grants import Row, rows
from agentfn.shared.identity import Caller

log = logging.getLogger("agentfn.model.registry")

RECHECK = 0.5
EVERYONE = "system:authenticated"
API_VERSION, KIND = "agentfn.dev/v1alpha1", "Registry"
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
AGENT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MEMORY_MODES = ("none", "preferences", "facts")
APPROVALS = ("required", "waived")


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


class Invalid(ValueError):
    pass


def _need(value: Any, kind: type, where: str):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise Invalid(f"{where} must be a {kind.__name__}")
    return value


def _strings(value: Any, where: str) -> frozenset[str]:
    items = _need(value, list, where)
    if not all(isinstance(x, str) and x for x in items):
        raise Invalid(f"{where} must list non-empty strings")
    return frozenset(items)


def _access(value: Any, where: str) -> Access:
    _need(value, dict, where)
    limit = value.get("dailyLimit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise Invalid(f"{where}.dailyLimit must be null or a positive integer")
    approval = value.get("approval", "required")  # a registry from before the field: ask
    if approval not in APPROVALS:
        raise Invalid(f"{where}.approval must be one of {', '.join(APPROVALS)}")
    return Access(
        _strings(value.get("subjects"), f"{where}.subjects"),
        _strings(value.get("groups"), f"{where}.groups"),
        limit,
        str(value.get("grant", "")),
        approval,
    )


def _accesses(value: Any, where: str) -> dict[str, Access]:
    _need(value, dict, where)
    out = {}
    for name, access in value.items():
        if not TOOL_NAME.match(name):
            raise Invalid(f"{where}: {name!r} is not a tool name")
        out[name] = _access(access, f"{where}.{name}")
    return out


def _limit(limits: dict, key: str, low: int, high: int, where: str) -> int:
    value = _need(limits.get(key), int, f"{where}.limits.{key}")
    if not low <= value <= high:
        raise Invalid(f"{where}.limits.{key} must be from {low} to {high}")
    return value


def parse(document: Any) -> Table:
    """The table of a registry document, or `Invalid` saying where it breaks the registry's shape."""
    _need(document, dict, "the registry")
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        raise Invalid(f"the registry must be apiVersion {API_VERSION}, kind {KIND}")
    agents = {}
    for name, spec in _need(document.get("agents"), dict, "agents").items():
        where = f"agents.{name}"
        if not AGENT_NAME.match(name):
            raise Invalid(f"{where}: not an agent name")
        _need(spec, dict, where)
        limits = _need(spec.get("limits"), dict, f"{where}.limits")
        memory = spec.get("memory")
        if memory not in MEMORY_MODES:
            raise Invalid(f"{where}.memory must be one of {', '.join(MEMORY_MODES)}")
        agents[name] = Agent(
            name=name,
            brief=_need(spec.get("brief"), str, f"{where}.brief"),
            tier=_need(spec.get("tier"), str, f"{where}.tier"),
            memory=memory,
            steps=_limit(limits, "steps", 0, 4, where),
            tokens_per_turn=_limit(limits, "tokensPerTurn", 1, 1_000_000, where),
            deadline_seconds=_limit(limits, "deadlineSeconds", 1, 600, where),
            tools=_accesses(spec.get("tools"), f"{where}.tools"),
        )
    return Table(
        str(document.get("revision", "")),
        agents,
        _accesses(document.get("alone"), "alone"),
        _accesses(document.get("mcp"), "mcp"),
        tuple(rows(document)),
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
            self._checked = now
            try:
                stamp = self._identity()
            except OSError:
                if self.loaded:
                    log.warning("registry file unreadable; keeping the last good table", extra={"event": "registry"})
                return self._table
            if stamp != self._stamp:
                self._load(stamp)
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
