"""Each tool's descriptor: one file, served unchanged at GET /v1/tool, strict, with the channels RFC 0002 allows."""

import json
from importlib import resources

import pytest
import requests
from jsonschema import Draft202012Validator
from support import TOOLS

from agentfn.shared.tool_function import changes_state, check_descriptor

# RFC 0002: the reads are callable alone and over MCP; run_code never.
CHANNELS = {"platform_status": True, "list_models": True, "radar_latest": True, "run_code": False}
# A call that changes state or spends the person's quota waits for their approval; the reads do not.
CHANGES_STATE = {"platform_status": False, "list_models": False, "radar_latest": False, "run_code": True}


def descriptor_file(tool: str) -> dict:
    return json.loads(resources.files(f"agentfn.{tool}").joinpath("tool.json").read_text())


@pytest.mark.parametrize("tool", TOOLS)
def test_the_door_serves_the_file_unchanged(every_tool, issuer, tool):
    response = requests.get(
        every_tool[tool].url + "/v1/tool", headers=issuer.tool_headers(tool, "reader", ["platform-users"])
    )
    assert response.status_code == 200
    assert response.json() == descriptor_file(tool)
    assert list(response.json()) == ["name", "description", "input_schema", "callable_alone", "mcp", "changes_state"]


@pytest.mark.parametrize("tool", TOOLS)
def test_the_descriptor_is_strict_and_names_its_channels(tool):
    descriptor = check_descriptor(descriptor_file(tool))
    assert descriptor["name"] == tool
    Draft202012Validator.check_schema(descriptor["input_schema"])
    assert descriptor["input_schema"]["additionalProperties"] is False
    assert descriptor["callable_alone"] is CHANNELS[tool] and descriptor["mcp"] is CHANNELS[tool]
    assert 40 <= len(descriptor["description"]) <= 400


@pytest.mark.parametrize("tool", TOOLS)
def test_the_descriptor_needs_a_caller(every_tool, tool):
    response = requests.get(every_tool[tool].url + "/v1/tool")
    assert response.status_code == 401
    assert response.headers["Content-Type"] == "application/problem+json"


@pytest.mark.parametrize(
    "broken",
    [
        {"name": "x", "description": "d", "input_schema": {"type": "object"}, "callable_alone": True, "mcp": True},
        {
            "name": "x",
            "description": "d",
            "input_schema": {"type": "object", "additionalProperties": False},
            "callable_alone": "yes",
            "mcp": True,
        },
        {
            "name": "x",
            "description": "d",
            "input_schema": {"type": "object", "additionalProperties": False},
            "callable_alone": True,
            "mcp": True,
            "extra": 1,
        },
        {
            "name": "x",
            "description": "d",
            "input_schema": {"type": "object", "additionalProperties": False},
            "callable_alone": True,
        },
        {
            "name": "x",
            "description": "d",
            "input_schema": {"type": "object", "additionalProperties": False},
            "callable_alone": True,
            "mcp": True,
            "changes_state": "no",
        },
    ],
    ids=["not strict", "a channel not boolean", "an extra key", "a missing key", "changes_state not boolean"],
)
def test_a_broken_descriptor_is_refused(broken):
    with pytest.raises(ValueError):
        check_descriptor(broken)


@pytest.mark.parametrize("tool", TOOLS)
def test_the_descriptor_says_whether_a_call_changes_state(tool):
    assert descriptor_file(tool)["changes_state"] is CHANGES_STATE[tool]


def test_a_descriptor_that_does_not_say_is_taken_to_change_state():
    older = {
        "name": "x",
        "description": "d",
        "input_schema": {"type": "object", "additionalProperties": False},
        "callable_alone": True,
        "mcp": True,
    }
    assert changes_state(check_descriptor(older)) is True
    assert changes_state(check_descriptor({**older, "changes_state": False})) is False
