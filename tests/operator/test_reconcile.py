"""Static tier: the one pure reconcile, as a table of named cases, plus the rule that an invalid object
never widens access (a property over random grants) and the registry's own schema."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from support.operator import ROOT, example_objects

from agentfn.operator.catalog import CatalogEntry, from_descriptors
from agentfn.operator.reconcile import functions_in_use, reconcile

SCHEMA = json.loads((ROOT / "src" / "agentfn" / "shared" / "contract" / "registry.schema.json").read_text())


def agent(name, tool_catalog, memory="none", **spec):
    return {
        "kind": "Agent",
        "metadata": {"name": name, "namespace": "agentfn"},
        "spec": {"brief": f"{name} helps.", "tools": tool_catalog, "memory": memory, **spec},
    }


def grant(name, tool, agents=("code-reviewer",), created="", **spec):
    meta = {"name": name, "namespace": "agentfn", **({"creationTimestamp": created} if created else {})}
    body = {"tool": tool, "groups": ["developers"], **spec}
    if agents:
        body["agents"] = list(agents)
    return {"kind": "ToolGrant", "metadata": meta, "spec": body}


REVIEWER = agent("code-reviewer", ["run_code", "platform_status", "open_page", "remember", "forget"], "preferences")
GUIDE = agent("site-guide", ["platform_status"])


def outcome_of(tool_catalog, objects):
    return reconcile(
        tool_catalog, [o for o in objects if o["kind"] == "Agent"], [o for o in objects if o["kind"] == "ToolGrant"]
    )


def reasons(outcome):
    return {v.name: v.reason for v in outcome.verdicts}


def table(registry):
    """The registry as {agent: [tools]} plus the alone and mcp tool lists."""
    shape = {name: sorted(a["tools"]) for name, a in registry["agents"].items()}
    return {**shape, "alone": sorted(registry["alone"]), "mcp": sorted(registry["mcp"])}


CASES = [
    (
        "valid: one grant per tool",
        [
            REVIEWER,
            GUIDE,
            grant("g-code", "run_code"),
            grant("g-status", "platform_status", ["code-reviewer", "site-guide"], mcp=True),
        ],
        {"g-code": "Granted", "g-status": "Granted", "code-reviewer": "Ungranted", "site-guide": "Ready"},
        {
            "code-reviewer": ["platform_status", "run_code"],
            "site-guide": ["platform_status"],
            "alone": [],
            "mcp": ["platform_status"],
        },
    ),
    (
        "unknown tool in a grant",
        [REVIEWER, grant("g", "launch_rockets")],
        {"g": "UnknownTool", "code-reviewer": "Ungranted"},
        {"code-reviewer": [], "alone": [], "mcp": []},
    ),
    (
        "unknown tool in an agent: the agent and its grants are out",
        [agent("code-reviewer", ["run_code", "launch_rockets"]), grant("g", "run_code")],
        {"code-reviewer": "UnknownTool", "g": "AgentInvalid"},
        {"alone": [], "mcp": []},
    ),
    (
        "forbidden channel: run_code alone",
        [REVIEWER, grant("g", "run_code", callableAlone=True)],
        {"g": "ForbiddenChannel"},
        {"code-reviewer": [], "alone": [], "mcp": []},
    ),
    (
        "forbidden channel: open_page over MCP",
        [REVIEWER, grant("g", "open_page", mcp=True)],
        {"g": "ForbiddenChannel"},
        {"code-reviewer": [], "alone": [], "mcp": []},
    ),
    (
        "forbidden channel: a memory tool over MCP",
        [REVIEWER, grant("g", "remember", mcp=True)],
        {"g": "ForbiddenChannel"},
        {"code-reviewer": [], "alone": [], "mcp": []},
    ),
    (
        "forbidden agent: open_page for the site guide",
        [REVIEWER, agent("site-guide", ["platform_status", "open_page"]), grant("g", "open_page", ["site-guide"])],
        {"g": "ForbiddenAgent", "site-guide": "Ungranted"},
        {"code-reviewer": [], "site-guide": [], "alone": [], "mcp": []},
    ),
    (
        "unknown agent",
        [REVIEWER, grant("g", "platform_status", ["code-reviewer", "ghost"])],
        {"g": "UnknownAgent"},
        {"code-reviewer": [], "alone": [], "mcp": []},
    ),
    (
        "an agent that does not name the tool",
        [GUIDE, grant("g", "list_models", ["site-guide"])],
        {"g": "NotNamedByAgent", "site-guide": "Ungranted"},
        {"site-guide": [], "alone": [], "mcp": []},
    ),
    (
        "duplicate grants: the older wins, whatever the order",
        [
            REVIEWER,
            grant("newer", "run_code", created="2026-12-02T10:00:00Z"),
            grant("older", "run_code", created="2026-12-01T10:00:00Z", subjects=["ana"]),
        ],
        {"older": "Granted", "newer": "Conflict"},
        {"code-reviewer": ["run_code"], "alone": [], "mcp": []},
    ),
    (
        "duplicate grants of one channel: two grants make a tool callable alone",
        [
            REVIEWER,
            GUIDE,
            grant("first", "platform_status", ["code-reviewer"], callableAlone=True),
            grant("second", "platform_status", ["site-guide"], callableAlone=True),
        ],
        {"first": "Granted", "second": "Conflict"},
        {"code-reviewer": ["platform_status"], "site-guide": [], "alone": ["platform_status"], "mcp": []},
    ),
    (
        "an agent that remembers nothing with a memory tool",
        [agent("code-reviewer", ["remember"]), grant("g", "remember")],
        {"code-reviewer": "MemoryOff", "g": "AgentInvalid"},
        {"alone": [], "mcp": []},
    ),
    (
        "a grant with no callers",
        [REVIEWER, grant("g", "run_code", groups=[])],
        {"g": "NoCallers"},
        {"code-reviewer": [], "alone": [], "mcp": []},
    ),
    (
        "a grant with no channel",
        [REVIEWER, grant("g", "platform_status", agents=())],
        {"g": "NoChannel"},
        {"code-reviewer": [], "alone": [], "mcp": []},
    ),
    (
        "a typo in a spec is not taken for a default",
        [agent("site-guide", ["platform_status"], limits={"step": 9})],
        {"site-guide": "InvalidSpec"},
        {"alone": [], "mcp": []},
    ),
    (
        "limits out of bounds",
        [agent("site-guide", [], limits={"steps": 5})],
        {"site-guide": "InvalidSpec"},
        {"alone": [], "mcp": []},
    ),
    (
        "two agents of one name",
        [GUIDE, agent("site-guide", [])],
        {"site-guide": "Conflict"},
        {"site-guide": [], "alone": [], "mcp": []},
    ),
    (
        "an approval that is neither required nor waived",
        [REVIEWER, grant("g", "run_code", approval="sometimes")],
        {"g": "InvalidSpec"},
        {"code-reviewer": [], "alone": [], "mcp": []},
    ),
]


@pytest.mark.parametrize(("desc", "objects", "expected", "registry"), CASES, ids=[c[0] for c in CASES])
def test_reconcile(tool_catalog, desc, objects, expected, registry):
    outcome = outcome_of(tool_catalog, objects)
    got = reasons(outcome)
    assert {name: got[name] for name in expected} == expected
    assert table(outcome.registry) == registry
    Draft202012Validator(SCHEMA).validate(outcome.registry)
    for verdict in outcome.verdicts:
        assert verdict.ready is (verdict.reason in ("Granted", "Ready", "Ungranted"))
        if not verdict.ready:
            assert set(verdict.columns.values()) == {""}, "an invalid object shows no access"


@pytest.mark.parametrize(
    ("spec", "approval"),
    [({}, "required"), ({"approval": "required"}, "required"), ({"approval": "waived"}, "waived")],
    ids=["absent", "required", "waived"],
)
def test_a_grants_approval_reaches_every_access_it_gives(tool_catalog, spec, approval):
    outcome = outcome_of(
        tool_catalog, [REVIEWER, grant("g-code", "run_code", **spec), grant("g-status", "platform_status", mcp=True, **spec)]
    )
    Draft202012Validator(SCHEMA).validate(outcome.registry)
    assert outcome.registry["agents"]["code-reviewer"]["tools"]["run_code"]["approval"] == approval
    assert outcome.registry["mcp"]["platform_status"]["approval"] == approval


def test_the_examples_give_the_seed_agents_their_tools(tool_catalog):
    agents, grants = example_objects()
    outcome = reconcile(tool_catalog, agents, grants)
    assert all(v.ready for v in outcome.verdicts), [v for v in outcome.verdicts if not v.ready]
    assert table(outcome.registry) == {
        "code-reviewer": ["forget", "open_page", "platform_status", "remember", "run_code"],
        "site-guide": ["platform_status"],
        "alone": ["platform_status"],
        "mcp": ["platform_status"],
    }
    reviewer, guide = outcome.registry["agents"]["code-reviewer"], outcome.registry["agents"]["site-guide"]
    assert reviewer["memory"] == "facts" and guide["memory"] == "none"
    assert reviewer["tools"]["run_code"] == {
        "subjects": [],
        "groups": ["developers"],
        "dailyLimit": 50,
        "grant": "agentfn/code-reviewer-runs-code",
        "approval": "required",
    }
    assert functions_in_use(outcome.registry, tool_catalog) == ["memory", "page", "platform_status", "run_code"]
    Draft202012Validator(SCHEMA).validate(outcome.registry)


def test_deleting_a_grant_removes_its_access_and_only_its(tool_catalog):
    agents, grants = example_objects()
    before = reconcile(tool_catalog, agents, grants).registry
    after = reconcile(tool_catalog, agents, [g for g in grants if g["metadata"]["name"] != "code-reviewer-runs-code"])
    assert "run_code" in before["agents"]["code-reviewer"]["tools"]
    assert "run_code" not in after.registry["agents"]["code-reviewer"]["tools"]
    assert "run_code" not in functions_in_use(after.registry, tool_catalog)
    before["agents"]["code-reviewer"]["tools"].pop("run_code")
    assert {k: v for k, v in after.registry.items() if k != "revision"} == {
        k: v for k, v in before.items() if k != "revision"
    }
    assert reasons(after)["code-reviewer"] == "Ungranted"


def test_deleting_an_agent_voids_the_grants_that_name_it(tool_catalog):
    agents, grants = example_objects()
    outcome = reconcile(tool_catalog, [a for a in agents if a["metadata"]["name"] != "site-guide"], grants)
    assert reasons(outcome)["platform-status-for-everyone"] == "UnknownAgent"
    # All or nothing: the grant also named the reviewer, and no longer gives it anything.
    assert "platform_status" not in outcome.registry["agents"]["code-reviewer"]["tools"]
    assert outcome.registry["alone"] == {} and outcome.registry["mcp"] == {}


def test_a_descriptor_bounds_the_channels():
    quiet = {"quiet": CatalogEntry("quiet", "quiet", callable_alone=False, mcp=True, changes_state=False)}
    outcome = reconcile(quiet, [agent("a", ["quiet"])], [grant("g", "quiet", ["a"], callableAlone=True)])
    assert reasons(outcome)["g"] == "ForbiddenChannel"
    assert "by its descriptor" in next(v.message for v in outcome.verdicts if v.name == "g")


STATEFUL = {"input_schema": {"type": "object", "additionalProperties": False}, "callable_alone": True, "mcp": True}


@pytest.mark.parametrize(
    ("says", "flags"),
    [
        ({"changes_state": True}, {"callableAlone": True}),
        ({}, {"callableAlone": True}),  # a descriptor that does not say is taken to change state
        ({"changes_state": True}, {"mcp": True}),
    ],
    ids=["changes_state_alone", "unsaid_alone", "changes_state_over_mcp"],
)
def test_a_tool_that_changes_state_is_never_callable_alone_or_over_mcp_whatever_its_descriptor_says(says, flags):
    # The descriptor offers both channels; the grant asks for one of them: the operator refuses it.
    described = {"name": "close_incident", "description": "Closes an incident.", **STATEFUL, **says}
    catalog = from_descriptors([("incidents", described)])
    outcome = reconcile(
        catalog,
        [agent("site-guide", ["close_incident"])],
        [grant("g", "close_incident", ["site-guide"], **flags)],
    )
    verdict = next(v for v in outcome.verdicts if v.name == "g")
    assert (verdict.ready, verdict.reason) == (False, "ForbiddenChannel")
    channel = "alone" if "callableAlone" in flags else "over MCP"
    assert verdict.message == f"close_incident changes state: it is never callable {channel}"
    assert table(outcome.registry) == {"site-guide": [], "alone": [], "mcp": []}
    # As a step of an agent, where the person approves each call, it may be granted.
    alone = reconcile(catalog, [agent("site-guide", ["close_incident"])], [grant("step", "close_incident", ["site-guide"])])
    assert reasons(alone)["step"] == "Granted" and table(alone.registry)["site-guide"] == ["close_incident"]


def test_the_revision_follows_the_content_only(tool_catalog):
    agents, grants = example_objects()
    first = reconcile(tool_catalog, agents, grants).registry
    shuffled = reconcile(tool_catalog, list(reversed(agents)), list(reversed(grants))).registry
    assert first == shuffled
    edited = copy.deepcopy(grants)
    edited[0]["spec"]["dailyLimit"] = 7
    assert reconcile(tool_catalog, agents, edited).revision != first["revision"]


# --- an invalid object never widens access ----------------------------------------------------------

NAMES = ["code-reviewer", "site-guide", "ghost"]
TOOLS = ["platform_status", "list_models", "run_code", "open_page", "remember", "launch_rockets"]
grants_strategy = st.builds(
    lambda tool, agents, subjects, groups, alone, mcp, limit: {
        "tool": tool,
        "agents": agents,
        "subjects": subjects,
        "groups": groups,
        "callableAlone": alone,
        "mcp": mcp,
        **({"dailyLimit": limit} if limit else {}),
    },
    st.sampled_from(TOOLS),
    st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
    st.lists(st.sampled_from(["ana", "ivo"]), max_size=2, unique=True),
    st.lists(st.sampled_from(["developers", "system:authenticated"]), max_size=1, unique=True),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, 0, 10]),
)


def access(registry):
    """Every (channel, agent, tool, caller) the registry lets through."""
    found = set()
    for name, entry in registry["agents"].items():
        for tool, who in entry["tools"].items():
            found |= {("step", name, tool, c) for c in who["subjects"] + who["groups"]}
    for channel in ("alone", "mcp"):
        for tool, who in registry[channel].items():
            found |= {(channel, "", tool, c) for c in who["subjects"] + who["groups"]}
    return found


@settings(max_examples=150, deadline=None)
@given(existing=st.lists(grants_strategy, max_size=5), new=grants_strategy)
def test_a_new_grant_never_widens_access_unless_it_is_valid_and_adds_only_what_it_says(tool_catalog, existing, new):
    agents = [REVIEWER, agent("site-guide", ["platform_status", "list_models", "open_page"])]
    old = [
        {
            "kind": "ToolGrant",
            "metadata": {"name": f"g{i}", "namespace": "agentfn", "creationTimestamp": f"2026-12-01T00:00:0{i}Z"},
            "spec": s,
        }
        for i, s in enumerate(existing)
    ]
    added = {
        "kind": "ToolGrant",
        "metadata": {"name": "new", "namespace": "agentfn", "creationTimestamp": "2026-12-02T00:00:00Z"},
        "spec": new,
    }
    before = access(reconcile(tool_catalog, agents, old).registry)
    outcome = reconcile(tool_catalog, agents, [*old, added])
    after = access(outcome.registry)
    verdict = next(v for v in outcome.verdicts if v.name == "new")
    assert before <= after, "a newer grant never takes access away from an older one"
    if not verdict.ready:
        assert after == before
    else:
        callers = set(new["subjects"]) | set(new["groups"])
        said = {("step", a, new["tool"], c) for a in new["agents"] for c in callers} | {
            (ch, "", new["tool"], c)
            for ch, on in (("alone", new["callableAlone"]), ("mcp", new["mcp"]))
            if on
            for c in callers
        }
        assert after - before == said
