"""schemathesis against each tool's own /openapi.json: both doors answer as documented, never with a 5xx."""

import itertools

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from support import TOOLS, openapi_schema

GROUPS = ["platform-users", "platform-ops", "research", "staff"]
fresh = itertools.count()


@pytest.fixture(scope="module", params=TOOLS)
def tool_schema(request, every_tool):
    return openapi_schema(every_tool[request.param].url)


schema = schemathesis.pytest.from_fixture("tool_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_door_answers_as_documented(case, issuer):
    # A fresh subject each case, so run_code's daily runs never turn every later case into a 429.
    tool = case.operation.schema.raw_schema["info"]["title"].removeprefix("agentfn tool ")
    headers = issuer.tool_headers(tool, f"schemathesis-{next(fresh)}", GROUPS)
    response = case.call(headers=headers)
    assert response.status_code < 500, response.text
    case.validate_response(response)


@pytest.mark.parametrize("tool", TOOLS)
def test_the_document_lists_the_two_doors(every_tool, tool):
    document = requests.get(every_tool[tool].url + "/openapi.json", timeout=5).json()
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) == {"/v1/tool", "/v1/call"}
    body = document["paths"]["/v1/call"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    descriptor = requests.get(
        every_tool[tool].url + "/v1/tool", timeout=5, headers={"Authorization": "Bearer x"}
    ).status_code
    assert descriptor == 401
    assert body["properties"]["arguments"]["additionalProperties"] is False
