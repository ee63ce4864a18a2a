"""schemathesis against the model function's own /openapi.json: every door answers as documented, no 5xx."""

from __future__ import annotations

import itertools

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance
from support import openapi_schema

fresh = itertools.count()


@pytest.fixture(scope="module")
def model_schema(model):
    return openapi_schema(model.url)


schema = schemathesis.pytest.from_fixture("model_schema")


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_door_answers_as_documented(case, issuer):
    # A fresh subject each case: no case spends another's tokens. Turns reach the scripted engine.
    groups = ["platform-users", "developers"] + (["platform-admins"] if case.path.startswith("/v1/admin/") else [])
    headers = issuer.headers(f"schemathesis-{next(fresh)}", groups)
    if case.path == "/mcp":
        headers["Accept"] = "application/json, text/event-stream"
    response = case.call(headers=headers, timeout=30)
    assert response.status_code < 500, response.text[:500]
    case.validate_response(response, excluded_checks=excused(case, response))


def excused(case, response) -> list:
    """Checks a response is excused from, each for a reason a JSON Schema cannot state."""
    if response.status_code == 413:  # a body over the size cap is refused before its shape is read
        return [negative_data_rejection]
    if response.status_code == 422 and "the last message must be the person's" in response.text:
        return [positive_data_acceptance]  # "the last item has role user" has no JSON Schema keyword
    if response.status_code == 400 and "cursor: must be the `next` of an earlier page" in response.text:
        return [positive_data_acceptance]  # an opaque cursor the door gave out has no JSON Schema keyword
    if case.path == "/mcp" and response.status_code in (200, 202, 400):
        # MCP messages are the protocol's shapes, checked by the SDK: its verdict is a JSON-RPC error in a 200
        # or a 400, or a 202 for what it reads as a notification.
        return [positive_data_acceptance, negative_data_rejection]
    return []


def test_mcp_answers_post_only(model, person):
    for method in ("GET", "DELETE", "PUT"):
        response = requests.request(method, model.url + "/mcp", headers=person.headers, timeout=5)
        assert response.status_code == 405 and response.headers["Allow"] == "POST"


def test_the_document_lists_every_door(model):
    document = requests.get(model.url + "/openapi.json", timeout=5).json()
    assert set(document["paths"]) == {
        "/v1/agents",
        "/v1/agents/{agent}/turns",
        "/v1/agents/{agent}/sessions/end",
        "/internal/v1/engines/warm",
        "/v1/tools",
        "/v1/tools/{name}/call",
        "/mcp",
        "/v1/admin/generations",
        "/v1/admin/grants",
        "/v1/admin/calls",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    }
    turns = document["paths"]["/v1/agents/{agent}/turns"]["post"]["responses"]["200"]
    assert list(turns["content"]) == ["text/event-stream"]
    for event in ("recall", "step", "delta", "done", "error"):
        assert f"`{event}`" in turns["description"]
