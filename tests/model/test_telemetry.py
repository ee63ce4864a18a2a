"""Traces and metrics over OTLP/HTTP: one turn is one trace across the parts, named by the GenAI conventions,
and nothing anyone said, asked for, was answered or kept leaves in them.

The parts run under gunicorn with `OTEL_EXPORTER_OTLP_ENDPOINT` naming a test receiver on loopback (a test
double of a collector, tests/support/otlp_receiver.py); the turn recalls a note, calls two tools in one round (one
fails: its platform service answers 503) and answers.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time

import pytest
import requests
from support.model import SERVED_READS, Person, take_turn

from agentfn.devstack.harness.servers import READ_TOOLS, Gunicorn
from agentfn.devstack.otlp_receiver import Receiver

# Marker words, one for each kind of content: none may appear anywhere in what is exported.
MARKERS = {"message": "xylophonemarker", "argument": "zanzibarx", "answer": "quokkamarker", "entry": "wombatmarker"}
NOTE = f"Prefers four spaces for indentation in Python code, the {MARKERS['entry']} way."
QUESTION = "How should my Python code be formatted and indented?"
SERVER, INTERNAL = 2, 1  # OTLP span kinds


@pytest.fixture(scope="module")
def model_receiver():
    served = Receiver()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def traced(model_receiver, memory_env, model_env, upstreams, issuer, model_logs, page_fetcher):
    """Memory, the page fetcher, the two read tools and the model function, exporting to the receiver (batches sent
    every 100 ms); the page fetcher on the database of the untraced one."""
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": model_receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
    }
    servers = {
        "memory": Gunicorn("agentfn.memory.app:create_app()", {**memory_env, **otel}, model_logs / "memory-traced.log"),
        "page": Gunicorn(
            "agentfn.page.app:create_app()",
            {**issuer.env(), **otel, "AGENTFN_DATABASE_URL": page_fetcher.env["AGENTFN_DATABASE_URL"]},
            model_logs / "page-traced.log",
        ),
    }
    for tool in SERVED_READS:
        servers[tool] = Gunicorn(
            f"agentfn.{tool}.app:create_app()",
            {
                **issuer.env(),
                READ_TOOLS[tool]: upstreams[tool].url,
                "AGENTFN_UPSTREAM_TIMEOUT_SECONDS": "5",
                "AGENTFN_EXCHANGE_TOKEN_FILE": str(issuer.assertion_file(model_logs, tool)),
                **otel,
            },
            model_logs / f"{tool}-traced.log",
        )
    try:
        for server in servers.values():
            server.start()
        servers["model"] = Gunicorn(
            "agentfn.model.app:create_app()",
            {
                **model_env,
                "AGENTFN_MEMORY_URL": servers["memory"].url,
                "AGENTFN_PAGE_URL": servers["page"].url,
                "AGENTFN_TOOL_PLATFORM_STATUS_URL": servers["platform_status"].url,
                "AGENTFN_TOOL_LIST_MODELS_URL": servers["list_models"].url,
                **otel,
            },
            model_logs / "model-traced.log",
        )
        servers["model"].start()
        yield servers
    finally:
        for server in servers.values():
            if server.process is not None:
                server.stop()


@pytest.fixture(scope="module")
def turn(traced, scripted_engine, upstreams, issuer, model_receiver):
    """The turn: a note recalled, platform_status (ok) and list_models (fails) in one round, then the answer."""
    person = Person(issuer)
    note = requests.post(
        traced["memory"].url + "/v1/entries",
        headers=person.headers,
        timeout=30,
        json={"kind": "preference", "text": NOTE, "source": "test"},
    ).json()
    sid = scripted_engine.script(
        {
            "calls": [
                {"name": "platform_status", "arguments": {"service": MARKERS["argument"]}},
                {"name": "list_models", "arguments": {"embeds": True}},
            ]
        },
        {"text": f"Use four spaces [{note['id']}], {MARKERS['answer']}."},
    )
    controls = upstreams["list_models"].app.extensions["agentfn.dev_upstream"]
    controls.fail_status = 503
    try:
        response, events = take_turn(
            traced["model"].url, person, "reviewer", f"{QUESTION} {MARKERS['message']} script:{sid}"
        )
    finally:
        controls.fail_status = 0
    assert response.status_code == 200 and events[-1][0] == "done", events
    generation = events[-1][1]["generation_id"]
    root = model_receiver.wait_for(
        lambda: [
            s
            for s in model_receiver.spans()
            if s.name == "invoke_agent reviewer" and s.attributes.get("agentfn.generation.id") == generation
        ]
    )[0]
    # Every part's spans of the turn: the model's door and steps, memory's door and search, each tool function's.
    expected = {
        ("agentfn-model", "POST /v1/agents/<name>/turns"),
        ("agentfn-model", "execute_tool list_models"),
        ("agentfn-model", "execute_tool platform_status"),
        ("agentfn-memory", "search_memory"),
        ("agentfn-platform_status", "execute_tool platform_status"),
        ("agentfn-list_models", "execute_tool list_models"),
    }
    spans = model_receiver.wait_for(
        lambda: (
            expected <= {(s.service, s.name) for s in model_receiver.spans(root.trace_id)}
            and model_receiver.spans(root.trace_id)
        )
    )
    return {"person": person, "note": note, "events": events, "root": root, "spans": spans}


def one(spans, name, service=None):
    found = [s for s in spans if s.name == name and (service is None or s.service == service)]
    assert len(found) == 1, (name, service, [(s.service, s.name) for s in spans])
    return found[0]


def test_a_turn_is_one_trace_across_the_parts_with_genai_names_and_parents(turn, issuer):
    spans, root, person = turn["spans"], turn["root"], turn["person"]
    by_id = {s.span_id: s for s in spans}
    assert {s.service for s in spans} == {
        "agentfn-model",
        "agentfn-memory",
        "agentfn-platform_status",
        "agentfn-list_models",
    }
    door = one(spans, "POST /v1/agents/<name>/turns", "agentfn-model")
    assert door.kind == SERVER and door.parent_id == "" and door.attributes["http.route"] == "/v1/agents/<name>/turns"
    assert root.parent_id == door.span_id and root.schema_url.endswith("/1.41.0")
    assert root.attributes == {
        **root.attributes,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "reviewer",
        "gen_ai.request.model": "scripted",
        "agentfn.outcome": "ok",
        "agentfn.steps": 2,
        "agentfn.rounds": 2,
        "user.hash": issuer.subject_hash(person.subject),
    }
    assert root.attributes["gen_ai.usage.input_tokens"] > 0 and root.attributes["gen_ai.usage.output_tokens"] > 0
    chats = [s for s in spans if s.name == "chat scripted"]
    assert len(chats) == 2 and all(
        c.parent_id == root.span_id
        and c.attributes["gen_ai.operation.name"] == "chat"
        and c.attributes["gen_ai.usage.input_tokens"] > 0
        for c in chats
    )
    # The recall: memory's door and its search, children of the turn.
    recall = one(spans, "POST /v1/recall", "agentfn-memory")
    search = one(spans, "search_memory", "agentfn-memory")
    assert recall.parent_id == root.span_id and search.parent_id == recall.span_id
    assert search.attributes["gen_ai.operation.name"] == "search_memory" and search.attributes["agentfn.memory.entries"] >= 1
    assert recall.attributes["user.hash"] == issuer.subject_hash(person.subject)
    # Each step: the model's execute_tool, the tool function's door under it, and the tool's own execute_tool.
    for tool, status in (("platform_status", "ok"), ("list_models", "error")):
        step = one(spans, f"execute_tool {tool}", "agentfn-model")
        assert step.parent_id == root.span_id
        assert step.attributes == {
            **step.attributes,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "agentfn.channel": "step",
            "agentfn.status": status,
        }
        served = one(spans, "POST /v1/call", f"agentfn-{tool}")
        inner = one(spans, f"execute_tool {tool}", f"agentfn-{tool}")
        assert served.parent_id == step.span_id and inner.parent_id == served.span_id
        if status == "error":
            assert step.status == 2 and step.attributes["error.type"] == "upstream" and inner.status == 2
        else:
            assert step.status != 2 and "error.type" not in step.attributes
    assert all(s.parent_id in by_id for s in spans if s is not door)  # no orphan: every part joined the one trace


def test_nothing_said_asked_answered_or_kept_is_exported(turn, model_receiver):
    events = turn["events"]
    results = [d["result"] for n, d in events if n == "step" and "result" in d]
    assert MARKERS["argument"] in str(results[0])  # the tool's result quotes the argument: a marker of results too
    everything = model_receiver.raw()
    for marker in [*MARKERS.values(), turn["note"]["id"], turn["person"].subject]:
        assert marker.encode() not in everything, marker
    for span in turn["spans"]:
        text = repr((span.name, span.attributes, span.events, span.status_message))
        for marker in MARKERS.values():
            assert marker not in text
        assert not span.events  # no exception (its message may quote data) is recorded
        assert not any(
            k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.prompt", "gen_ai.completion", "url."))
            or k in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "http.target", "url.path")
            for k in span.attributes
        )


def test_metrics_arrive_with_the_conventions_names_and_the_platforms_counts(turn, traced, model_receiver):
    # A turn its agent's tokens per turn cannot hold is refused at the door: a budget refusal.
    refused, _ = take_turn(traced["model"].url, turn["person"], "frugal", "word " * 2000)
    assert refused.status_code == 429, refused.text

    def latest(metric, service, **attrs):
        points = [
            p
            for p in model_receiver.points()
            if p.metric == metric and p.service == service and all(p.attributes.get(k) == v for k, v in attrs.items())
        ]
        return points[-1] if points else None

    def arrived():
        return all(latest(*key[:2], **key[2]) for key in wanted)

    wanted = [
        ("gen_ai.client.operation.duration", "agentfn-model", {"gen_ai.operation.name": "chat"}),
        ("gen_ai.client.token.usage", "agentfn-model", {"gen_ai.token.type": "input"}),
        ("gen_ai.client.token.usage", "agentfn-model", {"gen_ai.token.type": "output"}),
        ("gen_ai.client.operation.duration", "agentfn-model", {"gen_ai.tool.name": "list_models"}),
        ("agentfn.turns", "agentfn-model", {"agentfn.outcome": "ok"}),
        ("agentfn.steps", "agentfn-model", {"gen_ai.tool.name": "platform_status", "agentfn.status": "ok"}),
        ("agentfn.steps", "agentfn-model", {"gen_ai.tool.name": "list_models", "agentfn.status": "error"}),
        ("agentfn.recall.duration", "agentfn-memory", {}),
        ("agentfn.recall.entries", "agentfn-memory", {}),
        ("agentfn.budget.refusals", "agentfn-model", {"agentfn.limit": "turn-tokens"}),
        ("agentfn.turns", "agentfn-model", {"agentfn.outcome": "budget"}),
    ]
    model_receiver.wait_for(arrived)
    assert latest("gen_ai.client.operation.duration", "agentfn-model", **{"gen_ai.operation.name": "chat"}).value == 2
    assert latest("gen_ai.client.operation.duration", "agentfn-model", **{"gen_ai.operation.name": "chat"}).unit == "s"
    assert latest("gen_ai.client.token.usage", "agentfn-model", **{"gen_ai.token.type": "input"}).unit == "{token}"
    failed = latest("gen_ai.client.operation.duration", "agentfn-model", **{"gen_ai.tool.name": "list_models"})
    assert failed.value == 1 and failed.attributes["error.type"] == "upstream"
    turns = latest("agentfn.turns", "agentfn-model", **{"agentfn.outcome": "ok"})
    assert turns.value == 1 and turns.attributes["gen_ai.agent.name"] == "reviewer"
    assert latest("agentfn.steps", "agentfn-model", **{"gen_ai.tool.name": "platform_status"}).value == 1
    assert latest("agentfn.steps", "agentfn-model", **{"gen_ai.tool.name": "list_models"}).value == 1
    assert latest("agentfn.budget.refusals", "agentfn-model", **{"agentfn.limit": "turn-tokens"}).value == 1
    assert (
        latest("agentfn.turns", "agentfn-model", **{"agentfn.outcome": "budget"}).attributes["gen_ai.agent.name"] == "frugal"
    )
    assert latest("agentfn.recall.entries", "agentfn-memory").value == 1  # one recall, its count of entries
    assert latest("agentfn.recall.entries", "agentfn-memory").total >= 1
    names = {p.metric for p in model_receiver.points()}
    assert not {n for n in names if not n.startswith(("gen_ai.", "agentfn."))}


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_without_a_collector_nothing_of_opentelemetry_is_loaded(env, on):
    """Off costs nothing: no SDK, no exporter, no processor thread; on, the SDK is set up by the app's skeleton."""
    code = (
        "import sys, threading; from agentfn.shared import app, telemetry; "
        "app.create_app('agentfn.probe', openapi={}, readiness={}, identity=None); "
        "print(telemetry.enabled(), any(m.startswith('opentelemetry') for m in sys.modules), "
        "any(t.name.startswith('Otel') for t in threading.enumerate()))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(on)] * 3


def test_an_opened_page_is_a_child_span_with_its_outcome_and_never_its_url(traced, scripted_engine, issuer, model_receiver):
    person, url = Person(issuer), "http://127.0.0.1/pathmarkerzz?q=querymarkerzz"
    sid = scripted_engine.script({"call": {"name": "open_page", "arguments": {"url": url}}}, {"text": "It would not open."})
    _, events = take_turn(traced["model"].url, person, "reviewer", f"Open {url} please. script:{sid}")
    assert events[-1][0] == "done", events
    # The fetcher refuses a loopback address (its guard, as shipped): a page fetched with an outcome, not a page read.
    step = next(d for n, d in events if n == "step" and d["status"] == "error")
    root = model_receiver.wait_for(
        lambda: [
            s
            for s in model_receiver.spans()
            if s.name == "invoke_agent reviewer" and s.attributes["agentfn.generation.id"] == events[-1][1]["generation_id"]
        ]
    )[0]
    spans = model_receiver.wait_for(
        lambda: (found := model_receiver.spans(root.trace_id)) and any(s.name == "fetch_page" for s in found) and found
    )
    tool = one(spans, "execute_tool open_page", "agentfn-model")
    door = one(spans, "POST /v1/open", "agentfn-page")
    fetch = one(spans, "fetch_page", "agentfn-page")
    assert tool.parent_id == root.span_id and door.parent_id == tool.span_id and fetch.parent_id == door.span_id
    kind = fetch.attributes["agentfn.outcome"]
    assert step["result"]["type"].endswith(kind.replace("_", "-")) or kind in step["result"]["type"]
    assert fetch.status == 2 and fetch.attributes["error.type"] == kind
    assert door.attributes["agentfn.page.cached"] is False
    pages = model_receiver.wait_for(
        lambda: [
            p for p in model_receiver.points() if p.metric == "agentfn.pages" and p.attributes.get("agentfn.outcome") == kind
        ]
    )
    assert pages[-1].value == 1 and pages[-1].service == "agentfn-page"
    for marker in (b"pathmarkerzz", b"querymarkerzz", b"127.0.0.1/"):
        assert marker not in model_receiver.raw()


def test_a_call_alone_is_an_execute_tool_span_on_its_channel_with_the_tool_function_under_it(traced, issuer, model_receiver):
    person = Person(issuer)
    answer = requests.post(
        traced["model"].url + "/v1/tools/platform_status/call",
        headers=person.headers,
        timeout=30,
        json={"arguments": {"service": MARKERS["argument"]}},
    )
    assert answer.status_code == 200, answer.text
    hashed = issuer.subject_hash(person.subject)
    door = model_receiver.wait_for(
        lambda: [
            s
            for s in model_receiver.spans()
            if s.name == "POST /v1/tools/<name>/call" and s.attributes.get("user.hash") == hashed
        ]
    )[0]
    spans = model_receiver.wait_for(
        lambda: (
            (found := model_receiver.spans(door.trace_id))
            and any(s.service == "agentfn-platform_status" and s.name.startswith("execute_tool") for s in found)
            and found
        )
    )
    step = one(spans, "execute_tool platform_status", "agentfn-model")
    served = one(spans, "POST /v1/call", "agentfn-platform_status")
    assert step.parent_id == door.span_id and served.parent_id == step.span_id
    assert step.attributes["agentfn.channel"] == "alone" and step.attributes["agentfn.status"] == "ok"
    assert MARKERS["argument"].encode() not in model_receiver.raw()


def test_memorys_writes_are_spans_with_their_operation_and_counts_and_never_the_text(traced, issuer, model_receiver):
    person, marker = Person(issuer), "notemarkerzz"
    base, headers = traced["memory"].url, person.headers
    kept = requests.post(
        base + "/v1/entries",
        headers=headers,
        timeout=30,
        json={"kind": "fact", "text": f"Keeps a {marker} on the desk.", "source": "sourcemarkerzz"},
    )
    assert kept.status_code == 201, kept.text
    entry = kept.json()["id"]
    assert (
        requests.patch(
            base + f"/v1/entries/{entry}", headers=headers, timeout=30, json={"text": f"Keeps two {marker} on the desk."}
        ).status_code
        == 200
    )
    assert requests.delete(base + f"/v1/entries/{entry}", headers=headers, timeout=30).status_code == 204
    assert (
        requests.delete(base + "/v1/entries", headers=headers, timeout=30, json={"confirm": "forget everything"}).status_code
        == 200
    )
    hashed = issuer.subject_hash(person.subject)
    doors = model_receiver.wait_for(
        lambda: (
            (
                found := [
                    s
                    for s in model_receiver.spans()
                    if s.service == "agentfn-memory" and s.attributes.get("user.hash") == hashed
                ]
            )
            and len(found) >= 4
            and found
        )
    )
    inner = {d.name: [s for s in model_receiver.spans(d.trace_id) if s.parent_id == d.span_id] for d in doors}
    names = sorted((d.name, [s.name for s in inner[d.name]]) for d in doors)
    assert names == [
        ("DELETE /v1/entries", ["delete_memory"]),
        ("DELETE /v1/entries/<entry_id>", ["delete_memory"]),
        ("PATCH /v1/entries/<entry_id>", ["update_memory"]),
        ("POST /v1/entries", ["update_memory"]),
    ]
    assert inner["POST /v1/entries"][0].attributes["agentfn.memory.kind"] == "fact"
    assert inner["DELETE /v1/entries/<entry_id>"][0].attributes["agentfn.memory.entries"] == 1
    for secret in (marker, "sourcemarkerzz", entry, person.subject):
        assert secret.encode() not in model_receiver.raw()


def test_a_method_outside_the_known_set_is_other_in_spans_and_logs(traced, model_receiver):
    """A caller picks the method; only the known ones (RFC 9110's and PATCH) are named as sent: any other is `_OTHER`
    in the span's attribute and the log line, and `HTTP` in the span's name, as the HTTP conventions say."""
    memory, request_id = traced["memory"], f"req-method-{secrets.token_hex(6)}"
    for method in ("XMARKERZZ", "DELETE"):
        answer = requests.request(
            method, memory.url + "/no/such/door", headers={"X-Request-Id": f"{request_id}-{method}"}, timeout=30
        )
        assert answer.status_code == 404, answer.text
    spans = model_receiver.wait_for(
        lambda: (
            (
                found := [
                    s
                    for s in model_receiver.spans()
                    if s.service == "agentfn-memory"
                    and s.kind == SERVER
                    and s.attributes.get("http.response.status_code") == 404
                ]
            )
            and len({s.attributes["http.request.method"] for s in found}) >= 2
            and found
        )
    )
    assert {(s.name, s.attributes["http.request.method"]) for s in spans} == {("HTTP", "_OTHER"), ("DELETE", "DELETE")}
    lines = {}
    deadline = time.monotonic() + 10
    while len(lines) < 2 and time.monotonic() < deadline:
        lines = {
            r["request_id"]: r
            for r in map(json.loads, filter(lambda line: request_id in line, memory.log.read_text().splitlines()))
        }
        time.sleep(0.05)
    assert lines[f"{request_id}-XMARKERZZ"]["method"] == "_OTHER" and lines[f"{request_id}-DELETE"]["method"] == "DELETE"
    assert b"XMARKERZZ" not in model_receiver.raw()
    assert "XMARKERZZ" not in memory.log.read_text().replace(f"{request_id}-XMARKERZZ", "")
