"""The reads run as the caller: each tool takes only a token the model function exchanged for it, the
platform service receives one exchanged again for it (the caller's subject and groups, never a token another
part would take), the service decides what each caller sees, forged tokens stop at the door, and the
service's refusals and failures come back as clear problems."""

import base64
import json
import time

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import ec
from support.tools import UPSTREAM_TIMEOUT, call

from agentfn.devstack.harness.identity import MODEL_SERVICE, account
from agentfn.devstack.harness.servers import READ_TOOLS
from agentfn.shared.contract import audience

READERS = {"platform_status": ["platform-users"], "list_models": ["platform-users"], "radar_latest": ["platform-users"]}
# Each tool's privileged group, and what only that group's members see.
PRIVILEGED = {
    "platform_status": (
        "platform-ops",
        lambda c: {a["name"] for a in c["attention"]} >= {"operator"} and c["figures"]["open_incidents"] == 1,
    ),
    "list_models": ("research", lambda c: "deep" in {t["name"] for t in c["tiers"]}),
    "radar_latest": ("staff", lambda c: any(d["title"].startswith("Internal:") for d in c["digests"])),
}


def unverified(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


def test_the_service_receives_a_token_exchanged_for_it(read_tools, upstreams, issuer):
    for tool in READ_TOOLS:
        sent = issuer.tool_headers(tool, f"forwarded-{tool}", READERS[tool])
        response = call(read_tools[tool].url, sent)
        assert response.status_code == 200, response.text
        received = upstreams[tool].controls.received[-1]
        assert received != sent["Authorization"].removeprefix("Bearer ")
        claims = unverified(received)
        assert claims["sub"] == f"forwarded-{tool}" and claims["groups"] == READERS[tool]
        assert claims["aud"] == audience("upstream", tool)
        assert claims["act"] == {"sub": account(tool), "act": {"sub": MODEL_SERVICE}}  # the tool, for the model function
        assert claims["exp"] - claims["iat"] <= 300


@pytest.mark.parametrize("tool", READ_TOOLS)
def test_the_service_takes_no_token_another_part_would_take(read_tools, upstreams, issuer, tool):
    """What reaches a platform service opens no other door: not another tool's, not memory's."""
    assert call(read_tools[tool].url, issuer.tool_headers(tool, "replayer", READERS[tool])).status_code == 200
    received = upstreams[tool].controls.received[-1]
    for other in READ_TOOLS:
        assert call(read_tools[other].url, {"Authorization": f"Bearer {received}"}).status_code == 401


@pytest.mark.parametrize("tool", READ_TOOLS)
def test_two_callers_with_different_groups_see_different_things(read_tools, issuer, tool):
    group, privileged_sight = PRIVILEGED[tool]
    plain = call(read_tools[tool].url, issuer.tool_headers(tool, "plain-reader", READERS[tool]), {}).json()["content"]
    privileged = call(read_tools[tool].url, issuer.tool_headers(tool, "privileged-reader", [group]), {}).json()["content"]
    assert privileged_sight(privileged) and not privileged_sight(plain)
    assert plain != privileged


def claims(issuer, tool, **changes):
    now = int(time.time())
    base = {
        "iss": issuer.url,
        "sub": "mallory",
        "aud": audience("tool", tool),
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "groups": ["platform-ops", "research", "staff"],
        "act": {"sub": MODEL_SERVICE},
    }
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


def tampered(issuer, tool):
    header, _, signature = issuer.exchanged(audience("tool", tool), "mallory", ["platform-users"]).split(".")
    payload = base64.urlsafe_b64encode(json.dumps(claims(issuer, tool)).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


def other_tool(tool):
    return "run_code" if tool != "run_code" else "platform_status"


FORGED = {
    "alg none": lambda i, t: jwt.encode(claims(i, t), None, algorithm="none"),
    "another key under the issuer's kid": lambda i, t: jwt.encode(
        claims(i, t), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers={"kid": i.kid}
    ),
    "groups raised in a signed payload": tampered,
    "expired": lambda i, t: i.sign(
        claims(i, t, exp=int(time.time()) - 120, iat=int(time.time()) - 900, nbf=int(time.time()) - 900)
    ),
    "wrong audience": lambda i, t: i.sign(claims(i, t, aud="someone-else")),
    "wrong issuer": lambda i, t: i.sign(claims(i, t, iss="https://evil.example")),
    "a service account": lambda i, t: i.service_token(MODEL_SERVICE, audience=audience("tool", t)),
    # Never callable on its own: the caller's own gateway token, even valid, opens no tool.
    "the caller's own gateway token": lambda i, t: i.caller_token("mallory", ["platform-users"]),
    "exchanged for another tool": lambda i, t: i.exchanged(audience("tool", other_tool(t)), "mallory", ["platform-users"]),
    "exchanged for memory": lambda i, t: i.exchanged(audience("memory"), "mallory", ["platform-users"]),
    "for this tool, no actor": lambda i, t: i.sign(claims(i, t, act=None)),
    "for this tool, an untrusted actor": lambda i, t: i.sign(claims(i, t, act={"sub": account("page")})),
    "for this tool, the actor nested under another": lambda i, t: i.sign(
        claims(i, t, act={"sub": account("page"), "act": {"sub": MODEL_SERVICE}})
    ),
    "none at all": None,
}


@pytest.mark.parametrize("forge", FORGED.values(), ids=FORGED.keys())
@pytest.mark.parametrize("tool", [*READ_TOOLS, "run_code"])
def test_a_forged_token_stops_at_the_door(every_tool, upstreams, issuer, tool, forge):
    before = len(upstreams[tool].controls.received) if tool in upstreams else None
    headers = {"Authorization": f"Bearer {forge(issuer, tool)}"} if forge else {}
    arguments = {"code": "print('ran')"} if tool == "run_code" else {}
    response = call(every_tool[tool].url, headers, arguments)
    assert response.status_code == 401, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    if before is not None:
        assert len(upstreams[tool].controls.received) == before


@pytest.mark.parametrize("tool", READ_TOOLS)
def test_the_service_refusing_the_caller_is_not_allowed(read_tools, upstreams, issuer, tool):
    response = call(read_tools[tool].url, issuer.tool_headers(tool, "outsider", ["visitors"]))
    assert response.status_code == 403, response.text
    problem = response.json()
    assert problem["type"].endswith("/not-allowed") and "does not allow this caller" in problem["detail"]
    assert unverified(upstreams[tool].controls.received[-1])["sub"] == "outsider"  # the service said no, not the tool


@pytest.mark.parametrize("tool", READ_TOOLS)
def test_a_slow_service_is_a_timeout_problem(read_tools, upstreams, issuer, tool):
    upstreams[tool].controls.delay_seconds = UPSTREAM_TIMEOUT + 2
    started = time.monotonic()
    response = call(read_tools[tool].url, issuer.tool_headers(tool, "patient", READERS[tool]))
    assert response.status_code == 504, response.text
    assert time.monotonic() - started < UPSTREAM_TIMEOUT + 1.5
    assert response.json()["type"].endswith("/upstream") and "did not answer within" in response.json()["detail"]


@pytest.mark.parametrize("status", [500, 503])
@pytest.mark.parametrize("tool", READ_TOOLS)
def test_a_failing_service_is_an_upstream_problem(read_tools, upstreams, issuer, tool, status):
    upstreams[tool].controls.fail_status = status
    response = call(read_tools[tool].url, issuer.tool_headers(tool, "unlucky", READERS[tool]))
    assert response.status_code == 502, response.text
    assert f"failed (HTTP {status})" in response.json()["detail"]
    assert "fault the test asked for" not in response.text  # the service's words never pass through


@pytest.mark.parametrize("tool", READ_TOOLS)
def test_a_service_that_is_down_is_an_upstream_problem(fragile, issuer, tool):
    upstream, served = fragile(tool)
    headers = issuer.tool_headers(tool, "early-bird", READERS[tool])
    assert call(served.url, headers).status_code == 200
    upstream.stop()
    response = call(served.url, headers)
    assert response.status_code == 502, response.text
    assert "is not answering" in response.json()["detail"]
    assert requests.get(served.url + "/readyz", timeout=5).status_code == 503


def test_logs_hold_neither_the_token_nor_what_the_service_said(read_tools, issuer):
    for tool in READ_TOOLS:
        token = issuer.exchanged(audience("tool", tool), "log-watcher", ["platform-ops", "research", "staff"])
        assert call(read_tools[tool].url, {"Authorization": f"Bearer {token}"}).status_code == 200
        text = read_tools[tool].log.read_text()
        assert token.split(".")[1] not in text and token.split(".")[2] not in text
        assert "leader election" not in text and "Qwen3-32B" not in text and "GPU slot plan" not in text
        assert '"route": "/v1/call"' in text
