"""Static tier: the CRDs' CEL rules (x-kubernetes-validations), evaluated offline with celpy.

The 1.20 apiserver of the third tier cannot run them, so they are proven here, Gateway API style: a
valid base object and `(desc, patch, message | None)` rows. The same rows then go through the
operator's reconcile, which must refuse exactly what the rules refuse (it is the wall on old clusters).
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from support.operator import schema_of

from agentfn.operator.reconcile import reconcile

BASE_GRANT = {"tool": "platform_status", "agents": ["site-guide"], "groups": ["visitors"]}
BASE_AGENT = {"brief": "Answers visitors.", "tools": ["platform_status"]}

FORBIDDEN = "run_code, open_page and the memory tools are never callable alone or over MCP"
REVIEWER_ONLY = "only the code reviewer (agent code-reviewer) may be granted run_code or open_page"
NO_CALLERS = "a grant names at least one subject or group"
NO_CHANNEL = "a grant gives at least one channel (agents, callableAlone or mcp)"
MEMORY_OFF = "an agent that remembers nothing cannot have the memory tools remember or forget"

GRANT_ROWS = [
    ("the base grant is valid", {}, None),
    ("a read tool may be callable alone and over MCP", {"callableAlone": True, "mcp": True}, None),
    ("a grant only for MCP needs no agents", {"agents": None, "mcp": True}, None),
    ("subjects alone are callers enough", {"groups": None, "subjects": ["ana"]}, None),
    ("run_code for the reviewer, as a step", {"tool": "run_code", "agents": ["code-reviewer"]}, None),
    ("run_code alone", {"tool": "run_code", "agents": ["code-reviewer"], "callableAlone": True}, FORBIDDEN),
    ("run_code over MCP", {"tool": "run_code", "agents": ["code-reviewer"], "mcp": True}, FORBIDDEN),
    ("open_page over MCP", {"tool": "open_page", "agents": ["code-reviewer"], "mcp": True}, FORBIDDEN),
    ("open_page alone, no agents", {"tool": "open_page", "agents": None, "callableAlone": True}, FORBIDDEN),
    ("remember alone", {"tool": "remember", "agents": ["code-reviewer"], "callableAlone": True}, FORBIDDEN),
    ("forget over MCP", {"tool": "forget", "agents": ["code-reviewer"], "mcp": True}, FORBIDDEN),
    ("open_page for the site guide", {"tool": "open_page"}, REVIEWER_ONLY),
    (
        "open_page for the reviewer and another",
        {"tool": "open_page", "agents": ["code-reviewer", "site-guide"]},
        REVIEWER_ONLY,
    ),
    ("run_code for the site guide", {"tool": "run_code"}, REVIEWER_ONLY),
    ("no subjects and no groups", {"groups": None}, NO_CALLERS),
    ("empty subjects and groups", {"groups": [], "subjects": []}, NO_CALLERS),
    ("no channel at all", {"agents": None}, NO_CHANNEL),
    ("an empty agent list and nothing else", {"agents": []}, NO_CHANNEL),
]

AGENT_ROWS = [
    ("the base agent is valid", {}, None),
    (
        "remembering preferences with both memory tools",
        {"memory": "preferences", "tools": ["platform_status", "remember", "forget"]},
        None,
    ),
    ("no tools at all", {"tools": None}, None),
    ("remember without memory", {"tools": ["remember"]}, MEMORY_OFF),
    ("forget with memory none said aloud", {"memory": "none", "tools": ["forget"]}, MEMORY_OFF),
]


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What the apiserver does before it runs the rules: fill in the schema's defaults."""
    if isinstance(value, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                value[name] = apply_defaults(child, value[name])
    return value


def patched(base: dict, patch: dict) -> dict:
    spec = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


def failures(kind: str, spec: dict) -> list[str]:
    schema = schema_of(kind)["properties"]["spec"]
    value = celpy.json_to_cel(apply_defaults(schema, copy.deepcopy(spec)))
    env = celpy.Environment()
    failed = []
    for rule in schema["x-kubernetes-validations"]:
        if not env.program(env.compile(rule["rule"])).evaluate({"self": value}):
            failed.append(rule["message"])
    return failed


@pytest.mark.parametrize(("desc", "patch", "message"), GRANT_ROWS, ids=[r[0] for r in GRANT_ROWS])
def test_toolgrant_rules(desc, patch, message):
    assert failures("ToolGrant", patched(BASE_GRANT, patch)) == ([message] if message else [])


@pytest.mark.parametrize(("desc", "patch", "message"), AGENT_ROWS, ids=[r[0] for r in AGENT_ROWS])
def test_agent_rules(desc, patch, message):
    assert failures("Agent", patched(BASE_AGENT, patch)) == ([message] if message else [])


def _agents() -> list[dict]:
    every = ["platform_status", "run_code", "open_page", "remember", "forget"]
    return [
        {"metadata": {"name": name, "namespace": "agentfn"}, "spec": {"brief": "b", "tools": every, "memory": "preferences"}}
        for name in ("code-reviewer", "site-guide")
    ]


@pytest.mark.parametrize(("desc", "patch", "message"), GRANT_ROWS, ids=[r[0] for r in GRANT_ROWS])
def test_the_reconcile_refuses_exactly_what_the_grant_rules_refuse(tool_catalog, desc, patch, message):
    grant = {"metadata": {"name": "g", "namespace": "agentfn"}, "spec": patched(BASE_GRANT, patch)}
    (verdict,) = [v for v in reconcile(tool_catalog, _agents(), [grant]).verdicts if v.kind == "ToolGrant"]
    assert verdict.ready is (message is None), verdict


@pytest.mark.parametrize(("desc", "patch", "message"), AGENT_ROWS, ids=[r[0] for r in AGENT_ROWS])
def test_the_reconcile_refuses_exactly_what_the_agent_rules_refuse(tool_catalog, desc, patch, message):
    agent = {"metadata": {"name": "a", "namespace": "agentfn"}, "spec": patched(BASE_AGENT, patch)}
    (verdict,) = reconcile(tool_catalog, [agent], []).verdicts
    assert verdict.ready is (message is None), verdict
