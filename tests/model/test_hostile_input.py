"""Bodies that make a backtracking regex engine work quadratically are refused at once, at every door with
a pattern in its schema: the model function's turns and session ends, a tool's call through the model
function and the tool function's own door. Nothing is checked against a grant before the body is."""

from __future__ import annotations

import json
import time

import pytest
import requests

LIMIT_SECONDS = 1.5  # generous for a loaded 2-core machine; the quadratic pattern took minutes here
BIG = 250_000  # characters: the body stays under the model function's 256 KiB limit
WITHIN = 31_999  # a message's maxLength less one: the pattern itself must be linear


def user(content: str) -> dict:
    return {"role": "user", "content": content}


CASES = [
    # (name, door, body, the field the detail names)
    ("one long message ending in NUL", "turns", {"messages": [user("a" * BIG + "\0")]}, "content"),
    ("one long message of spaces ending in NUL", "turns", {"messages": [user(" " * BIG + "\0")]}, "content"),
    ("seven messages within their length ending in NUL", "turns", {"messages": [user("a" * WITHIN + "\0")] * 7}, "content"),
    (
        "a good message, then one ending in NUL",
        "turns",
        {"messages": [user("Hello."), user("a b" * (BIG // 3) + "\0")]},
        "content",
    ),
    (
        "a session's end ending in NUL",
        "sessions/end",
        {"messages": [user("a" * BIG + "\0")], "session_id": "s-1"},
        "content",
    ),
    (
        "a session's end within its length ending in NUL",
        "sessions/end",
        {"messages": [user(" " * WITHIN + "\0")] * 7},
        "content",
    ),
    (
        "a tool's argument ending in NUL, through the model function",
        "tool",
        {"arguments": {"service": "a" * BIG + "\0"}},
        "service",
    ),
    (
        "a tool's argument ending in NUL, at the tool function",
        "tool function",
        {"arguments": {"service": "a" * 16_000 + "\0"}},
        "service",
    ),
]


@pytest.mark.parametrize(("door", "body", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_hostile_pattern_body_is_refused_at_once(model, model_read_tools, issuer, person, door, body, field):
    url = {
        "turns": f"{model.url}/v1/agents/reviewer/turns",
        "sessions/end": f"{model.url}/v1/agents/reviewer/sessions/end",
        "tool": f"{model.url}/v1/tools/platform_status/call",
        "tool function": f"{model_read_tools['platform_status'].url}/v1/call",
    }[door]
    # The tool function takes only a token exchanged for it (what the model function sends).
    auth = (
        issuer.tool_headers("platform_status", person.subject, person.groups) if door == "tool function" else person.headers
    )
    headers = {**auth, "Content-Type": "application/json"}
    # Warm: the token's keys fetched and the schema compiled, so the bound times the check alone.
    assert requests.post(url, json={"nothing": True}, headers=auth, timeout=60).status_code == 422
    data = json.dumps(body).encode()
    assert len(data) < 16 * 1024 if door == "tool function" else len(data) < 256 * 1024
    started = time.perf_counter()
    response = requests.post(url, data=data, headers=headers, timeout=60)
    took = time.perf_counter() - started
    assert response.status_code == 422, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert f"{field}: " in response.json()["detail"], response.json()
    assert took < LIMIT_SECONDS, f"{took:.2f} s"
