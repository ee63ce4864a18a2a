"""The dev gateway (agentfn.cli.gateway): only the public doors are routed, whatever the method; they stream through."""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

import pytest
import requests
from support.model import parse_sse

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HIDDEN = (
    "/internal/v1/episodes",
    "/healthz",
    "/readyz",
    "/openapi.json",
    "/v1/open",
    "/v1/call",
    "/v1/tool",
    "/v1/agents/../../internal/v1/episodes",
    "/v1/agents/%2e%2e/%2e%2e/internal/v1/episodes",
    "/v1/entries/../../internal/v1/episodes",
    "/v1/entriesx",
    "/v1/entries/x/y",
    "/v1/recall/x",
    "/v1/recallx",
    "/v1/toolsx",
    "/v1/agentsx",
    "/v1/pages",
    "/v1/pages/open",
    "/v1/runs",
    "/mcpx",
    "/v2/entries",
    "//internal/v1/episodes",
    "/V1/entries",
    "/.well-known/oauth-protected-resource/x",
    "/.well-known/oauth-protected-resourcex",
    "/.well-known/openid-configuration",
    "/.well-known/jwks.json",
    "/.well-known/../internal/v1/episodes",
    "/index.html",
    "/assets",
    "/assets/",
    "/assets/a/b",
    "/assets/../internal/v1/episodes",
    "/assets/%2e%2e/internal/v1/episodes",
    "/workbench.jsonx",
    "/v1/adminx",
    "/v1/admin/../../internal/v1/episodes",
    "/v1/admin/%2e%2e/%2e%2e/internal/v1/episodes",
    "/V1/admin/grants",
)


def raw(gateway, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    """A request whose path is sent as written: requests would resolve the dot segments first."""
    where = urlsplit(gateway.url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("path", HIDDEN)
def test_a_path_that_is_not_a_public_door_is_404_whatever_the_method(gateway, issuer, person, method, path):
    status, content_type, body = raw(gateway, method, path, person.headers, b"{}")
    assert status == 404 and content_type == "application/problem+json", (status, body)
    problem = json.loads(body)
    assert problem["status"] == 404 and problem["title"] and problem["type"]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/entries", None),
        ("POST", "/v1/entries", {"kind": "fact", "text": "x", "source": "t"}),
        ("PATCH", "/v1/entries/00000000-0000-0000-0000-000000000000", {"text": "x"}),
        ("DELETE", "/v1/entries/00000000-0000-0000-0000-000000000000", None),
        ("POST", "/v1/recall", {"query": "x"}),
        ("GET", "/v1/agents", None),
        ("POST", "/v1/agents/reviewer/turns", {"messages": [{"role": "user", "content": "x"}]}),
        ("POST", "/v1/agents/reviewer/sessions/end", {"messages": [{"role": "user", "content": "x"}]}),
        ("GET", "/v1/tools", None),
        ("POST", "/v1/tools/platform_status/call", {"arguments": {}}),
        ("DELETE", "/v1/entries", {"confirm": "forget everything"}),
        ("GET", "/v1/admin/generations", None),
        ("GET", "/v1/admin/grants", None),
        ("GET", "/v1/admin/calls", None),
    ],
)
def test_the_public_doors_are_routed_and_ask_for_a_token(gateway, method, path, body):
    response = requests.request(method, gateway.url + path, json=body, timeout=30)
    assert response.status_code == 401, response.text
    assert response.headers["Content-Type"] == "application/problem+json" and response.json()["status"] == 401


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/", "text/html"),
        ("/assets/app.js", "text/javascript"),
        ("/assets/app.css", "text/css"),
        ("/workbench.json", "application/json"),
    ],
)
def test_the_workbench_is_at_the_site_root_with_its_policy(gateway, path, kind):
    response = requests.get(gateway.url + path, timeout=30)
    assert response.status_code == 200 and response.headers["Content-Type"].startswith(kind)
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    missing = requests.get(gateway.url + "/assets/nothing.js", timeout=30)
    assert missing.status_code == 404 and missing.headers["Content-Type"] == "application/problem+json"


def test_with_a_token_the_doors_answer_as_the_caller(gateway, memory, person):
    kept = requests.post(
        gateway.url + "/v1/entries",
        headers=person.headers,
        timeout=30,
        json={"kind": "fact", "text": "Works on the ledger service.", "source": "test"},
    )
    assert kept.status_code == 201
    mine = requests.get(memory.url + "/v1/entries", headers=person.headers, timeout=30).json()["entries"]
    assert [e["id"] for e in mine] == [kept.json()["id"]]  # the same entry, straight from memory
    for path in ("/v1/entries?kind=fact", "/v1/agents", "/v1/tools"):
        assert requests.get(gateway.url + path, headers=person.headers, timeout=30).status_code == 200
    assert (
        requests.post(
            gateway.url + "/v1/tools/platform_status/call", json={"arguments": {}}, headers=person.headers, timeout=30
        ).status_code
        == 200
    )


def test_forget_all_and_the_admin_doors_answer_through_the_gateway(gateway, issuer, person):
    kept = requests.post(
        gateway.url + "/v1/entries",
        headers=person.headers,
        timeout=30,
        json={"kind": "fact", "text": "Works on the ledger service.", "source": "test"},
    )
    assert kept.status_code == 201
    refused = requests.delete(gateway.url + "/v1/entries", json={"confirm": "yes"}, headers=person.headers, timeout=30)
    assert refused.status_code == 422 and "forget everything" in refused.json()["detail"]
    forgot = requests.delete(
        gateway.url + "/v1/entries", json={"confirm": "forget everything"}, headers=person.headers, timeout=30
    )
    assert forgot.status_code == 200 and forgot.json()["total"] == 1  # the body came through
    admin = issuer.headers(person.subject, ["platform-admins"])
    for path in ("/v1/admin/generations?limit=1", "/v1/admin/grants", "/v1/admin/calls?limit=1"):
        assert requests.get(gateway.url + path, headers=person.headers, timeout=30).status_code == 403
        assert requests.get(gateway.url + path, headers=admin, timeout=30).status_code == 200


def test_a_turn_streams_through_event_by_event(gateway, scripted_engine, person):
    sid = scripted_engine.script({"text": "One, two, three.", "chunks": 3, "chunk_delay": 0.8})
    started = time.monotonic()
    seen: list[tuple[str, float]] = []
    with requests.post(
        f"{gateway.url}/v1/agents/reviewer/turns",
        headers=person.headers,
        stream=True,
        timeout=60,
        json={"messages": [{"role": "user", "content": f"Count to three. script:{sid}"}]},
    ) as response:
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
        text = ""
        for line in response.iter_lines(decode_unicode=True):
            text += line + "\n"
            if line.startswith("event: "):
                seen.append((line[7:], time.monotonic() - started))
    events = parse_sse(text)
    assert [n for n, _ in events] == ["recall", "delta", "delta", "delta", "done"]
    assert "".join(d["text"] for n, d in events if n == "delta") == "One, two, three."
    first_delta = next(t for n, t in seen if n == "delta")
    assert dict(seen)["done"] - first_delta > 1.2  # the first piece came while the engine was still writing
