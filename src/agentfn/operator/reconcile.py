"""The one pure reconcile: (tool catalog, Agents, ToolGrants) -> the registry document and a verdict per object.

The same function runs in the operator (objects from the API) and in local mode (objects from YAML
files), so it applies the CRDs' defaults and re-checks every rule the CRDs state: an apiserver may be
too old to run CEL rules, and a YAML file is checked by nobody else.

Rules (an invalid object never widens access: it is left out of the registry whole):
- an Agent names only catalog tools, and the memory tools only if it remembers something;
- a ToolGrant names a catalog tool, callers (subjects or groups), at least one channel, agents that
  exist, are valid and name the tool; `run_code`, `open_page` and the memory tools are never callable
  alone or over MCP, nor is a tool whose descriptor says it changes state (or does not say: no one would
  approve its calls there), and a tool's descriptor bounds its channels; `run_code` and `open_page` go
  only to the agents allowed them (the code reviewer);
- each (tool, agent) and each (tool, alone) and (tool, mcp) has at most one grant: the oldest wins
  (creation time, then order, then name, as Gateway API settles conflicts), the others are `Conflict`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfn.shared.contract import (
    ALONE,
    APPROVALS,
    MCP,
    MEMORY_MODES,
    MEMORY_TOOLS,
    NEVER_ALONE_OR_MCP,
    REGISTRY_API_VERSION,
    STEP,
    TOOL_NAME,
)

from .catalog import ONLY_FOR, Catalog

API_VERSION = "agentfn.dev/v1alpha1"  # the CRDs' group and version
# The CRDs' defaults (charts/agentfn/files/crds/); a static test keeps the two in step.
AGENT_DEFAULTS = {"tier": "fast", "tools": [], "memory": "none"}
LIMIT_DEFAULTS = {"steps": 4, "tokensPerTurn": 8000, "deadlineSeconds": 60}
LIMIT_BOUNDS = {"steps": (0, 4), "tokensPerTurn": (1, 1_000_000), "deadlineSeconds": (1, 600)}
AGENT_FIELDS = ("brief", "tier", "tools", "memory", "limits")
GRANT_FIELDS = ("tool", "agents", "subjects", "groups", "callableAlone", "mcp", "dailyLimit", "approval")
GRANT_DEFAULTS = {"approval": "required"}
OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
TIER = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


class InvalidObject(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class ObjectStatus:
    """What the operator writes to one object's status: Ready or Invalid, why, and the effective columns."""

    kind: str
    namespace: str
    name: str
    generation: int | None
    ready: bool
    reason: str
    message: str
    columns: Mapping[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Reconciled:
    registry: dict[str, Any]
    verdicts: list[ObjectStatus]

    @property
    def revision(self) -> str:
        return self.registry["revision"]


@dataclass
class _Agent:
    obj: Mapping[str, Any]
    name: str
    spec: dict[str, Any]


@dataclass
class _Grant:
    obj: Mapping[str, Any]
    name: str
    order: tuple
    tool: str
    agents: list[str]
    subjects: list[str]
    groups: list[str]
    channels: list[str]
    daily_limit: int | None
    approval: str = "required"


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, int | None]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "default", meta.get("name") or "", meta.get("generation")


def _names(value: Any, what: str, pattern: re.Pattern | None = None, *, limit: int = 256) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise InvalidObject("InvalidSpec", f"{what} must be a list of non-empty strings")
    if len(value) > limit or len(set(value)) != len(value):
        raise InvalidObject("InvalidSpec", f"{what} must hold at most {limit} names, each once")
    for x in value:
        if (pattern and not pattern.match(x)) or len(x) > 255:
            raise InvalidObject("InvalidSpec", f"{what}: {x!r} is not a valid name")
    return list(value)


def _spec(obj: Mapping[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise InvalidObject("InvalidSpec", "the object has no spec")
    _known(spec, fields, "spec")
    return spec


def _known(value: Mapping[str, Any], fields: Iterable[str], where: str) -> None:
    # The apiserver prunes unknown fields; a YAML file keeps them, and a typo must not pass as a default.
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise InvalidObject("InvalidSpec", f"{where} has unknown fields: {', '.join(unknown)}")


def agent_spec(obj: Mapping[str, Any], catalog: Catalog) -> dict[str, Any]:
    """The agent's spec with the CRD's defaults, or `InvalidObject`."""
    raw = _spec(obj, AGENT_FIELDS)
    spec = {**AGENT_DEFAULTS, **raw}
    if not isinstance(spec.get("brief"), str) or not 1 <= len(spec["brief"]) <= 4000:
        raise InvalidObject("InvalidSpec", "brief must be a string of 1 to 4000 characters")
    if not isinstance(spec["tier"], str) or not TIER.match(spec["tier"]):
        raise InvalidObject("InvalidSpec", "tier must be a tier's name, e.g. fast")
    if spec["memory"] not in MEMORY_MODES:
        raise InvalidObject("InvalidSpec", f"memory must be one of {', '.join(MEMORY_MODES)}")
    limits = raw.get("limits") or {}
    if not isinstance(limits, dict):
        raise InvalidObject("InvalidSpec", "limits must be an object")
    _known(limits, LIMIT_DEFAULTS, "spec.limits")
    spec["limits"] = {**LIMIT_DEFAULTS, **limits}
    for key, (low, high) in LIMIT_BOUNDS.items():
        value = spec["limits"][key]
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise InvalidObject("InvalidSpec", f"limits.{key} must be an integer from {low} to {high}")
    tools = _names(spec["tools"], "tools", TOOL_NAME, limit=32)
    unknown = [t for t in tools if t not in catalog]
    if unknown:
        raise InvalidObject("UnknownTool", f"no tool named {', '.join(unknown)} in the catalog")
    if spec["memory"] == "none" and MEMORY_TOOLS & set(tools):
        raise InvalidObject("MemoryOff", "an agent that remembers nothing cannot have the memory tools remember or forget")
    spec["tools"] = tools
    return spec


def _grant(obj: Mapping[str, Any], catalog: Catalog, position: int) -> _Grant:
    """The grant's own checks (those that need no other object), or `InvalidObject`."""
    spec = _spec(obj, GRANT_FIELDS)
    tool = spec.get("tool")
    if not isinstance(tool, str) or not TOOL_NAME.match(tool):
        raise InvalidObject("InvalidSpec", "tool must be a tool's name")
    agents = _names(spec.get("agents"), "agents", OBJECT_NAME, limit=64)
    subjects = _names(spec.get("subjects"), "subjects")
    groups = _names(spec.get("groups"), "groups", limit=64)
    flags = {key: spec.get(key, False) for key in ("callableAlone", "mcp")}
    if not all(isinstance(v, bool) for v in flags.values()):
        raise InvalidObject("InvalidSpec", "callableAlone and mcp must be true or false")
    limit = spec.get("dailyLimit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1_000_000):
        raise InvalidObject("InvalidSpec", "dailyLimit must be an integer from 1 to 1000000")
    approval = spec.get("approval", GRANT_DEFAULTS["approval"])
    if approval not in APPROVALS:
        raise InvalidObject("InvalidSpec", f"approval must be one of {', '.join(APPROVALS)}")
    if tool not in catalog:
        raise InvalidObject("UnknownTool", f"no tool named {tool} in the catalog")
    channels = [STEP] * bool(agents) + [ALONE] * flags["callableAlone"] + [MCP] * flags["mcp"]
    forbidden = [c for c in channels if c not in catalog[tool].channels]
    if forbidden:
        names = " or ".join("over MCP" if c == MCP else "alone" for c in forbidden)
        if tool in NEVER_ALONE_OR_MCP:
            message = f"{tool} is never callable {names}"
        elif catalog[tool].changes_state:
            message = f"{tool} changes state: it is never callable {names}"
        else:
            message = f"{tool} is not, by its descriptor, callable {names}"
        raise InvalidObject("ForbiddenChannel", message)
    if tool in ONLY_FOR and not set(agents) <= ONLY_FOR[tool]:
        others = sorted(set(agents) - ONLY_FOR[tool])
        raise InvalidObject(
            "ForbiddenAgent",
            f"{tool} may only be granted to {', '.join(sorted(ONLY_FOR[tool]))}, not to {', '.join(others)}",
        )
    if not subjects and not groups:
        raise InvalidObject("NoCallers", "a grant names at least one subject or group")
    if not channels:
        raise InvalidObject("NoChannel", "a grant gives at least one channel (agents, callableAlone or mcp)")
    created = (obj.get("metadata") or {}).get("creationTimestamp") or ""
    name = _meta(obj)[1]
    return _Grant(obj, name, (created, position, name), tool, agents, subjects, groups, channels, limit, approval)


def _verdict(
    kind: str, obj: Mapping[str, Any], ready: bool, reason: str, message: str, columns: Mapping[str, str]
) -> ObjectStatus:
    namespace, name, generation = _meta(obj)
    return ObjectStatus(kind, namespace, name, generation, ready, reason, message, dict(columns))


NO_GRANT_COLUMNS = {"agents": "", "subjects": "", "groups": "", "channels": ""}


def reconcile(catalog: Catalog, agents: Sequence[Mapping[str, Any]], grants: Sequence[Mapping[str, Any]]) -> Reconciled:
    verdicts: list[ObjectStatus] = []

    # Agents: each on its own; a name seen twice (two namespaces, two files) keeps the first.
    valid_agents: dict[str, _Agent] = {}
    agent_objs: list[tuple[Mapping[str, Any], _Agent | InvalidObject]] = []
    seen: set[str] = set()
    for obj in agents:
        name = _meta(obj)[1]
        try:
            if name in seen:
                raise InvalidObject("Conflict", f"another agent is already named {name}")
            seen.add(name)
            parsed: _Agent | InvalidObject = _Agent(obj, name, agent_spec(obj, catalog))
            valid_agents[name] = parsed
        except InvalidObject as e:
            parsed = e
        agent_objs.append((obj, parsed))

    # Grants: own checks, then the agents they name, then conflicts, oldest first.
    candidates: list[_Grant] = []
    for position, obj in enumerate(grants):
        try:
            grant = _grant(obj, catalog, position)
            for agent in grant.agents:
                if agent not in valid_agents:
                    known = agent in seen
                    raise InvalidObject(
                        "AgentInvalid" if known else "UnknownAgent",
                        f"agent {agent} is invalid" if known else f"no agent named {agent}",
                    )
                if grant.tool not in valid_agents[agent].spec["tools"]:
                    raise InvalidObject("NotNamedByAgent", f"agent {agent} does not name the tool {grant.tool}")
            candidates.append(grant)
        except InvalidObject as e:
            verdicts.append(_verdict("ToolGrant", obj, False, e.reason, e.message, NO_GRANT_COLUMNS))

    owners: dict[tuple[str, ...], str] = {}
    effective: list[_Grant] = []
    for grant in sorted(candidates, key=lambda g: g.order):
        keys = [(grant.tool, STEP, a) for a in grant.agents] + [(grant.tool, c) for c in grant.channels if c != STEP]
        taken = next((k for k in keys if k in owners), None)
        if taken:
            what = (
                f"agent {taken[2]} already has {grant.tool}"
                if taken[1] == STEP
                else f"{grant.tool} is already callable {'over MCP' if taken[1] == 'mcp' else 'alone'}"
            )
            verdicts.append(
                _verdict(
                    "ToolGrant", grant.obj, False, "Conflict", f"{what} through grant {owners[taken]}", NO_GRANT_COLUMNS
                )
            )
            continue
        owners.update({k: grant.name for k in keys})
        effective.append(grant)

    registry = _document(valid_agents, effective)

    for grant in effective:
        verdicts.append(
            _verdict(
                "ToolGrant",
                grant.obj,
                True,
                "Granted",
                f"{grant.tool} for {_who(grant)} through {', '.join(grant.channels)}",
                {
                    "agents": ",".join(grant.agents),
                    "subjects": ",".join(grant.subjects),
                    "groups": ",".join(grant.groups),
                    "channels": ",".join(grant.channels),
                },
            )
        )
    for obj, parsed in agent_objs:
        if isinstance(parsed, InvalidObject):
            verdicts.append(_verdict("Agent", obj, False, parsed.reason, parsed.message, {"tools": ""}))
            continue
        granted = list(registry["agents"][parsed.name]["tools"])
        missing = [t for t in parsed.spec["tools"] if t not in granted]
        tools = [t for t in parsed.spec["tools"] if t in granted]
        if missing:
            reason, message = "Ungranted", f"in the registry; no grant gives it {', '.join(missing)}"
        else:
            reason, message = "Ready", "in the registry with " + (", ".join(tools) or "no tools")
        verdicts.append(_verdict("Agent", obj, True, reason, message, {"tools": ",".join(tools)}))
    return Reconciled(registry, verdicts)


def _who(grant: _Grant) -> str:
    parts = [f"subjects {', '.join(grant.subjects)}"] * bool(grant.subjects) + [f"groups {', '.join(grant.groups)}"] * bool(
        grant.groups
    )
    return " and ".join(parts)


def _access(grant: _Grant) -> dict[str, Any]:
    namespace = _meta(grant.obj)[0]
    return {
        "subjects": sorted(grant.subjects),
        "groups": sorted(grant.groups),
        "dailyLimit": grant.daily_limit,
        "grant": f"{namespace}/{grant.name}",
        "approval": grant.approval,
    }


def _document(agents: Mapping[str, _Agent], grants: Iterable[_Grant]) -> dict[str, Any]:
    """The registry (the contract's registry.schema.json): agent -> tools -> who; then the tools alone and over MCP."""
    body: dict[str, Any] = {"agents": {}, ALONE: {}, MCP: {}}
    for name in sorted(agents):
        agent = agents[name]
        namespace = _meta(agent.obj)[0]
        spec = agent.spec
        body["agents"][name] = {
            "object": f"{namespace}/{name}",
            "brief": spec["brief"],
            "tier": spec["tier"],
            "memory": spec["memory"],
            "limits": dict(spec["limits"]),
            "tools": {},
        }
    for grant in grants:
        for agent in grant.agents:
            body["agents"][agent]["tools"][grant.tool] = _access(grant)
        for channel in (ALONE, MCP):
            if channel in grant.channels:
                body[channel][grant.tool] = _access(grant)
    body = json.loads(json.dumps(body, sort_keys=True))  # canonical order: equal tables, equal bytes
    return {"apiVersion": REGISTRY_API_VERSION, "kind": "Registry", "revision": revision_of(body), **body}


def revision_of(body: Mapping[str, Any]) -> str:
    content = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "revision")}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def dumps(registry: Mapping[str, Any]) -> str:
    """The registry file's bytes: stable, so an unchanged table is an unchanged file."""
    return json.dumps(registry, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def functions_in_use(registry: Mapping[str, Any], catalog: Catalog) -> list[str]:
    """The functions serving some tool that some grant gives, through any channel (the NetworkPolicy's targets)."""
    tools = (
        {t for agent in registry["agents"].values() for t in agent["tools"]} | set(registry["alone"]) | set(registry["mcp"])
    )
    return sorted({catalog[t].function for t in tools})
