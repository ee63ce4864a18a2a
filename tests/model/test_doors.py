"""The model function's doors: T1 refusals, grants (404 alike), ListTools/CallTool, runs-as-the-caller."""

from __future__ import annotations

import json
import time

import psycopg
import pytest
import requests
from support import STATEFUL_TOOLS
from support.model import (
    EVERYONE,
    Person,
    access,
    agent,
    exchanged_for_upstream,
    registry_document,
    stateful_tool,
    take_turn,
)

from agentfn.devstack.harness.servers import Gunicorn


def generations(model_env, subject):
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        return conn.execute(
            "SELECT kind, channel, status, problem, steps, step_log FROM generations WHERE subject = %s ORDER BY started_at",
            (subject,),
        ).fetchall()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"tools": [{"type": "function", "function": {"name": "x", "parameters": {}}}]}, "tools"),
        ({"functions": [{"name": "x"}]}, "functions"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "tool", "tool_call_id": "1", "content": "{}"},
                    {"role": "user", "content": "go"},
                ]
            },
            "role tool",
        ),
        (
            {
                "messages": [
                    {"role": "assistant", "content": "x", "tool_calls": [{"id": "1"}]},
                    {"role": "user", "content": "go"},
                ]
            },
            "tool_calls",
        ),
    ],
    ids=["tools", "functions", "tool_choice", "response_format", "tool_role", "tool_calls"],
)
def test_a_request_that_declares_tools_is_refused(model, scripted_engine, person, model_env, body, named):
    sid = scripted_engine.script({"text": "never"})
    payload = {"messages": [{"role": "user", "content": f"hi script:{sid}"}], **body}
    response = requests.post(f"{model.url}/v1/agents/reviewer/turns", json=payload, headers=person.headers, timeout=10)
    assert response.status_code == 422 and response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("/caller-tools") and named in problem["detail"]
    assert scripted_engine.requests(sid) == [] and generations(model_env, person.subject) == []


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, 422),
        ({"messages": []}, 422),
        ({"messages": [{"role": "system", "content": "obey"}]}, 422),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]}, 422),
        ({"messages": [{"role": "user", "content": "   "}]}, 422),
        ({"messages": "hi"}, 422),
    ],
    ids=["empty", "no_messages", "system_role", "last_not_user", "blank", "not_a_list"],
)
def test_bad_bodies_are_problems_and_change_nothing(model, person, model_env, body, status):
    response = requests.post(f"{model.url}/v1/agents/reviewer/turns", json=body, headers=person.headers, timeout=10)
    assert response.status_code == status and response.json()["status"] == status
    assert generations(model_env, person.subject) == []


def test_not_json_and_no_token(model, person):
    r = requests.post(
        f"{model.url}/v1/agents/reviewer/turns", data="{", headers={**person.headers, "Content-Type": "application/json"}
    )
    assert r.status_code == 400
    assert requests.post(f"{model.url}/v1/agents/reviewer/turns", json={"messages": []}, timeout=5).status_code == 401


def test_an_agent_not_granted_reads_like_one_that_does_not_exist(model, person):
    secret = requests.post(
        f"{model.url}/v1/agents/secret/turns",
        headers=person.headers,
        timeout=10,
        json={"messages": [{"role": "user", "content": "hi"}]},
    )
    missing = requests.post(
        f"{model.url}/v1/agents/no-such-agent/turns",
        headers=person.headers,
        timeout=10,
        json={"messages": [{"role": "user", "content": "hi"}]},
    )
    assert secret.status_code == missing.status_code == 404
    strip = lambda r: {k: v for k, v in r.json().items() if k != "request_id"}  # noqa: E731
    assert strip(secret) == strip(missing)
    names = [a["name"] for a in requests.get(f"{model.url}/v1/agents", headers=person.headers).json()["agents"]]
    assert "secret" not in names and {"reviewer", "guide", "reviewer-small"} <= set(names)


def test_the_agents_list_shows_only_the_tools_granted_to_the_caller(model, person, stranger):
    def tools_of(who):
        agents = requests.get(f"{model.url}/v1/agents", headers=who.headers).json()["agents"]
        return next(a for a in agents if a["name"] == "reviewer")["tools"]

    assert tools_of(person) == ["forget", "list_models", "open_page", "platform_status", "remember", "run_code"]
    assert tools_of(stranger) == ["platform_status"]


def test_the_tool_is_reached_with_the_callers_token_exchanged(model, scripted_engine, upstreams, person):
    received = upstreams["platform_status"].app.extensions["agentfn.dev_upstream"].received
    sid = scripted_engine.script({"call": {"name": "platform_status", "arguments": {"service": "llm"}}}, {"text": "ok"})
    before = len(received)
    response, events = take_turn(model.url, person, "reviewer", f"Is llm up? script:{sid}")
    assert events[-1][0] == "done"
    assert received[before:] and exchanged_for_upstream(received[-1], person, "platform_status")
    ended = [d for n, d in events if n == "step" and d["status"] == "ok"][0]
    assert ended["result"]["text"].startswith("llm is up")
    # The engine is never sent the caller's token (only the conversation, which never holds it).
    assert person.token not in json.dumps(scripted_engine.requests(sid))


def test_a_grants_daily_limit_is_counted(model, scripted_engine, person):
    # Three different calls (the same call again would be a repeat, not a call).
    sid = scripted_engine.script(
        *[{"call": {"name": "platform_status", "arguments": {"service": s}}} for s in ("a", "b", "c")], {"text": "done"}
    )
    _, events = take_turn(model.url, person, "counted", f"Three times. script:{sid}")
    statuses = [
        (d["status"], (d.get("result") or {}).get("status")) for n, d in events if n == "step" and d["status"] != "started"
    ]
    assert statuses == [("ok", None), ("ok", None), ("error", 429)]


def test_open_page_is_a_step_that_reaches_the_page_fetcher_as_the_caller(model, scripted_engine, person):
    # The fetcher refuses a loopback address (its SSRF guard, as shipped): the refusal is the step's result.
    sid = scripted_engine.script({"call": {"name": "open_page", "arguments": {"url": "http://127.0.0.1/"}}}, {"text": "no"})
    _, events = take_turn(model.url, person, "reviewer", f"Open it. script:{sid}")
    ended = [d for n, d in events if n == "step" and d["status"] != "started"]
    assert ended[0]["status"] == "error" and 400 <= ended[0]["result"]["status"] < 500
    assert ended[0]["result"]["status"] != 401  # the caller's token was accepted by the fetcher


def test_list_tools_shows_only_the_reviewed_reads_the_caller_may_call_alone(model, person, stranger):
    listed = requests.get(f"{model.url}/v1/tools", headers=person.headers).json()["tools"]
    # run_code, open_page and remember are granted alone in this registry: never listed, whatever a grant says.
    assert [t["name"] for t in listed] == ["list_models", "platform_status"]
    assert all(set(t) == {"name", "description", "input_schema"} for t in listed)
    assert [t["name"] for t in requests.get(f"{model.url}/v1/tools", headers=stranger.headers).json()["tools"]] == [
        "platform_status"
    ]


def test_call_tool_runs_the_same_path_as_a_step(model, upstreams, person, model_env):
    received = upstreams["platform_status"].app.extensions["agentfn.dev_upstream"].received
    ok = requests.post(
        f"{model.url}/v1/tools/platform_status/call",
        json={"arguments": {"service": "radar"}},
        headers=person.headers,
        timeout=10,
    )
    assert ok.status_code == 200 and ok.json()["content"]["text"].startswith("radar is degraded")
    assert exchanged_for_upstream(received[-1], person, "platform_status")
    invalid = requests.post(
        f"{model.url}/v1/tools/platform_status/call",
        json={"arguments": {"service": "BAD!"}},
        headers=person.headers,
        timeout=10,
    )
    assert invalid.status_code == 422 and invalid.json()["type"].endswith("/invalid-arguments")
    for name in ("run_code", "open_page", "remember", "forget", "nothing"):
        r = requests.post(f"{model.url}/v1/tools/{name}/call", json={"arguments": {}}, headers=person.headers, timeout=10)
        assert r.status_code == 404, name
    rows = generations(model_env, person.subject)
    assert [(k, c, s, p) for k, c, s, p, _, _ in rows] == [
        ("tool_call", "alone", "ok", None),
        ("tool_call", "alone", "error", 422),
    ]
    assert [r[5] for r in rows][0][0]["tool"] == "platform_status"


@pytest.fixture(scope="module")
def stateful(issuer):
    served = {name: stateful_tool(issuer, name) for name in STATEFUL_TOOLS}
    yield served
    for server in served.values():
        server.stop()


@pytest.fixture(scope="module")
def stateful_model(model_env, stateful, model_logs, tmp_path_factory):
    """The model function with the tools of `stateful`, granted alone and over MCP to everyone, and as the steps
    of an agent whose grant waives approval."""
    document = registry_document()
    for name in stateful:
        document["alone"][name] = document["mcp"][name] = access([EVERYONE])
    waived = access([EVERYONE], approval="waived")
    document["agents"]["incident-desk"] = agent("Closes incidents.", "fast", "none", dict.fromkeys(stateful, waived))
    path = tmp_path_factory.mktemp("registry-stateful") / "registry.json"
    path.write_text(json.dumps(document))
    env = {
        **model_env,
        "AGENTFN_REGISTRY_FILE": str(path),
        **{f"AGENTFN_TOOL_{name.upper()}_URL": server.url for name, server in stateful.items()},
    }
    server = Gunicorn("agentfn.model.app:create_app()", env, model_logs / "model-stateful.log")
    server.start()
    yield server
    server.stop()


def test_a_tool_that_changes_state_is_never_callable_alone_whatever_its_descriptor_says(
    stateful_model, stateful, scripted_engine, person
):
    # The model function reaches them: as an agent's steps they run.
    sid = scripted_engine.script({"calls": [{"name": name, "arguments": {}} for name in stateful]}, {"text": "Done."})
    _, events = take_turn(stateful_model.url, person, "incident-desk", f"Close it and page on-call. script:{sid}")
    assert [(d["tool"], d["status"]) for n, d in events if n == "step" and d["status"] != "started"] == [
        (name, "ok") for name in stateful
    ]
    for server in stateful.values():
        server.app.extensions["calls"].clear()
    # Their descriptors offer them alone and over MCP, and the registry grants them so: neither lists nor runs them.
    listed = requests.get(f"{stateful_model.url}/v1/tools", headers=person.headers, timeout=10).json()["tools"]
    assert [t["name"] for t in listed] == ["list_models", "platform_status"]
    for name in stateful:
        called = requests.post(
            f"{stateful_model.url}/v1/tools/{name}/call", json={"arguments": {}}, headers=person.headers, timeout=10
        )
        assert called.status_code == 404, called.text
    over_mcp = requests.post(
        stateful_model.url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {person.mcp_token}"},
        timeout=30,
    )
    assert [t["name"] for t in over_mcp.json()["result"]["tools"]] == ["list_models", "platform_status"]
    assert all(server.app.extensions["calls"] == [] for server in stateful.values())


def test_call_tool_refused_by_the_platform_is_a_403(model, stranger):
    r = requests.post(f"{model.url}/v1/tools/platform_status/call", json={"arguments": {}}, headers=stranger.headers)
    assert r.status_code == 403


def test_the_registry_is_reloaded_without_a_restart(model, registry_file, person, issuer):
    newcomer = Person(issuer, groups=("newcomers",))
    url = f"{model.url}/v1/agents/latecomer/turns"
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert requests.post(url, json=body, headers=newcomer.headers).status_code == 404
    document = registry_document()
    document["agents"]["latecomer"] = {
        **document["agents"]["guide"],
        "tools": {"platform_status": {"subjects": [], "groups": ["newcomers"], "dailyLimit": None, "grant": "agentfn/new"}},
    }
    original = registry_file.read_text()
    try:
        registry_file.write_text(json.dumps(document))
        deadline = time.monotonic() + 5
        while requests.post(url, json=body, headers=newcomer.headers).status_code == 404:
            assert time.monotonic() < deadline, "the new agent never showed"
            time.sleep(0.2)
        # A broken file is refused whole: the last good table stays in force.
        registry_file.write_text("{ not json")
        time.sleep(1.2)
        assert requests.post(url, json=body, headers=newcomer.headers).status_code == 200
        assert requests.get(f"{model.url}/readyz").status_code == 200
    finally:
        registry_file.write_text(original)
    deadline = time.monotonic() + 5
    while requests.post(url, json=body, headers=newcomer.headers).status_code != 404:
        assert time.monotonic() < deadline, "the removed agent stayed"
        time.sleep(0.2)


def test_a_caller_who_leaves_mid_answer_ends_the_turn_as_cancelled(model, scripted_engine, person, model_env):
    sid = scripted_engine.script({"text": "one two three four five six seven eight", "chunks": 8, "chunk_delay": 0.3})
    with requests.post(
        f"{model.url}/v1/agents/guide/turns",
        headers=person.headers,
        stream=True,
        timeout=10,
        json={"messages": [{"role": "user", "content": f"Talk. script:{sid}"}]},
    ) as response:
        generation = response.headers["X-Generation-Id"]
        for line in response.iter_lines():
            if line == b"event: delta":
                break
    deadline = time.monotonic() + 10
    while True:
        with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
            row = conn.execute("SELECT status, reserved, tokens_in FROM generations WHERE id = %s", (generation,)).fetchone()
        if row[0] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    status, reserved, tokens_in = row
    assert (status, reserved) == ("cancelled", 0) and tokens_in > 0  # what the engine read still counts


def test_memory_not_answering_is_said_and_the_turn_goes_on(model_env, scripted_engine, person, tmp_path):
    from agentfn.devstack.harness.servers import Gunicorn

    env = {**model_env, "AGENTFN_MEMORY_URL": "http://127.0.0.1:9"}  # nothing listens there
    server = Gunicorn("agentfn.model.app:create_app()", env, tmp_path / "model-no-memory.log")
    server.start()
    try:
        sid = scripted_engine.script({"text": "Without memory."})
        _, events = take_turn(server.url, person, "reviewer", f"Hello. script:{sid}")
    finally:
        server.stop()
    assert events[0] == ("recall", {"entries": [], "unavailable": True}) and events[-1][0] == "done"
