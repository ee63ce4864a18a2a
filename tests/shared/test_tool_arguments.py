"""Arguments are checked against the tool's schema before anything runs: a bad one is a 422 naming the field,
and nothing reaches the platform service or the sandbox."""

import json

import pytest
import requests

READER = ["platform-users", "platform-ops", "research", "staff"]

CASES = [
    # (name, tool, body, status, words in the detail)
    ("no arguments", "platform_status", {}, 422, "missing required field 'arguments'"),
    ("arguments not an object", "list_models", {"arguments": []}, 422, "arguments: must be of type object"),
    ("an extra top-level field", "radar_latest", {"arguments": {}, "tool": "run_code"}, 422, "unknown field 'tool'"),
    (
        "an extra argument",
        "platform_status",
        {"arguments": {"service": "llm", "verbose": True}},
        422,
        "arguments: unknown field 'verbose'",
    ),
    (
        "service of the wrong type",
        "platform_status",
        {"arguments": {"service": 5}},
        422,
        "arguments.service: must be of type string",
    ),
    (
        "service oversized",
        "platform_status",
        {"arguments": {"service": "a" * 65}},
        422,
        "arguments.service: must be at most 64 characters",
    ),
    ("service empty", "platform_status", {"arguments": {"service": ""}}, 422, "arguments.service"),
    (
        "service with a path in it",
        "platform_status",
        {"arguments": {"service": "../admin"}},
        422,
        "arguments.service: has an invalid format",
    ),
    (
        "embeds not a boolean",
        "list_models",
        {"arguments": {"embeds": "yes"}},
        422,
        "arguments.embeds: must be of type boolean",
    ),
    ("an extra list_models argument", "list_models", {"arguments": {"tier": "deep"}}, 422, "unknown field 'tier'"),
    ("count as a string", "radar_latest", {"arguments": {"count": "3"}}, 422, "arguments.count: must be of type integer"),
    ("count too large", "radar_latest", {"arguments": {"count": 11}}, 422, "arguments.count: must be <= 10"),
    ("count zero", "radar_latest", {"arguments": {"count": 0}}, 422, "arguments.count: must be >= 1"),
    ("count fractional", "radar_latest", {"arguments": {"count": 2.5}}, 422, "arguments.count"),
    ("code missing", "run_code", {"arguments": {}}, 422, "arguments: missing required field 'code'"),
    (
        "code of the wrong type",
        "run_code",
        {"arguments": {"code": ["print(1)"]}},
        422,
        "arguments.code: must be of type string",
    ),
    ("code empty", "run_code", {"arguments": {"code": ""}}, 422, "arguments.code: must be at least 1 characters"),
    (
        "code oversized",
        "run_code",
        {"arguments": {"code": "#" * 20001}},
        422,
        "arguments.code: must be at most 20000 characters",
    ),
    (
        "an extra run_code argument",
        "run_code",
        {"arguments": {"code": "print(1)", "timeout": 60}},
        422,
        "unknown field 'timeout'",
    ),
    (
        "a language it does not run",
        "run_code",
        {"arguments": {"code": "echo hi", "language": "bash"}},
        422,
        "unknown field 'language'",
    ),
]


@pytest.mark.parametrize(("tool", "body", "status", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_argument_is_refused_before_anything_runs(every_tool, upstreams, issuer, tool, body, status, words):
    subject = f"refused-{tool}"
    headers = issuer.tool_headers(tool, subject, READER)
    before = len(upstreams[tool].controls.received) if tool in upstreams else None
    response = requests.post(every_tool[tool].url + "/v1/call", json=body, headers=headers, timeout=30)
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert words in response.json()["detail"], response.json()
    if before is not None:
        assert len(upstreams[tool].controls.received) == before, "the upstream was called"


def test_a_refused_run_costs_no_daily_run(run_code, issuer):
    headers = issuer.tool_headers("run_code", "refused-runner")
    for _ in range(8):  # more than the daily runs
        assert requests.post(run_code.url + "/v1/call", json={"arguments": {"code": ""}}, headers=headers).status_code == 422
    ok = requests.post(run_code.url + "/v1/call", json={"arguments": {"code": "print(1)"}}, headers=headers)
    assert ok.status_code == 200 and ok.json()["content"]["runs_left"] == 4


@pytest.mark.parametrize(
    ("name", "data", "ctype", "status", "words"),
    [
        ("bad JSON", b'{"arguments": {', "application/json", 400, "not valid JSON"),
        ("not JSON", b"arguments=1", "application/x-www-form-urlencoded", 415, "application/json"),
        ("a huge body", json.dumps({"arguments": {"code": "#" * 300_000}}).encode(), "application/json", 413, "larger than"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else None,
)
@pytest.mark.parametrize("tool", ["platform_status", "run_code"])
def test_a_body_that_is_not_arguments_is_refused(every_tool, issuer, tool, name, data, ctype, status, words):
    response = requests.post(
        every_tool[tool].url + "/v1/call",
        data=data,
        headers={**issuer.tool_headers(tool, "sloppy", READER), "Content-Type": ctype},
        timeout=30,
    )
    assert response.status_code == status, response.text
    assert words in response.json()["detail"]


def test_a_refusal_never_quotes_the_argument(every_tool, issuer):
    secret = "hunter2-" * 3000
    response = requests.post(
        every_tool["run_code"].url + "/v1/call",
        json={"arguments": {"code": secret}},
        headers=issuer.tool_headers("run_code", "quoter"),
        timeout=30,
    )
    assert response.status_code == 422 and "hunter2" not in response.text
