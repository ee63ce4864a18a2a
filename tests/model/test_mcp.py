"""`/mcp` with the official MCP SDK's client over Streamable HTTP, and with the MCP Inspector CLI (npm)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import httpx2
import psycopg
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from support import MCP_RESOURCE
from support.model import exchanged_for_upstream

from agentfn.shared.contract import audience

ROOT = Path(__file__).resolve().parent.parent.parent
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"  # 0.x CLIs have no --header


async def session_do(url: str, token: str | None, work):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                return await work(session)


def run(url, token, work):
    return asyncio.run(session_do(url, token, work))


def test_the_sdk_client_lists_only_the_mcp_reads(model, person, stranger):
    listed = run(model.url + "/mcp", person.mcp_token, lambda s: s.list_tools())
    # run_code and forget are granted over MCP in this registry: never listed, whatever a grant says.
    assert [t.name for t in listed.tools] == ["list_models", "platform_status"]
    status = next(t for t in listed.tools if t.name == "platform_status")
    assert status.input_schema["properties"]["service"]["pattern"]
    assert [t.name for t in run(model.url + "/mcp", stranger.mcp_token, lambda s: s.list_tools()).tools] == [
        "platform_status"
    ]


def test_the_sdk_client_calls_a_tool_as_the_caller(model, upstreams, person, model_env):
    received = upstreams["platform_status"].app.extensions["agentfn.dev_upstream"].received
    result = run(model.url + "/mcp", person.mcp_token, lambda s: s.call_tool("platform_status", {"service": "llm"}))
    assert not result.is_error
    assert json.loads(result.content[0].text)["text"].startswith("llm is up")
    assert result.structured_content["text"].startswith("llm is up")
    assert exchanged_for_upstream(received[-1], person, "platform_status")
    invalid = run(model.url + "/mcp", person.mcp_token, lambda s: s.call_tool("platform_status", {"service": "NOT OK"}))
    assert invalid.is_error and json.loads(invalid.content[0].text)["status"] == 422
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        rows = conn.execute(
            "SELECT kind, channel, status, step_log FROM generations WHERE subject = %s ORDER BY started_at",
            (person.subject,),
        ).fetchall()
    assert [(k, c, s, log[0]["tool"]) for k, c, s, log in rows] == [
        ("tool_call", "mcp", "ok", "platform_status"),
        ("tool_call", "mcp", "error", "platform_status"),
    ]


@pytest.mark.parametrize("name", ["run_code", "forget", "remember", "open_page", "no_such_tool"])
def test_tools_never_on_mcp_cannot_be_called(model, person, name):
    with pytest.raises(BaseExceptionGroup) as caught:
        run(model.url + "/mcp", person.mcp_token, lambda s: s.call_tool(name, {}))
    errors = leaves(caught.value)
    assert [(type(e), e.code, e.message) for e in errors] == [(MCPError, -32602, f"no such tool: {name}")]


def leaves(group):
    return [x for e in group.exceptions for x in (leaves(e) if isinstance(e, BaseExceptionGroup) else [e])]


REFUSED = {
    "none": lambda i: None,
    "not a JWT": lambda i: "not-a-jwt",
    "another audience": lambda i: i.caller_token("someone", audience="somewhere-else"),
    # The gateway's own token is for agentfn's doors, not for the MCP resource (no token passthrough).
    "the gateway's token": lambda i: i.caller_token("someone", ["platform-users"]),
    "exchanged for a tool": lambda i: i.exchanged(audience("tool", "platform_status"), "someone", ["platform-users"]),
}


@pytest.mark.parametrize("forge", REFUSED.values(), ids=REFUSED.keys())
def test_mcp_refuses_a_caller_without_a_token_for_it(model, issuer, forge):
    token = forge(issuer)
    with pytest.raises(BaseExceptionGroup) as caught:
        run(model.url + "/mcp", token, lambda s: s.list_tools())
    assert [type(e) for e in leaves(caught.value)] == [MCPError]  # the server's refusal (the 401 below), not a crash
    response = httpx2.post(
        model.url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream", **({"Authorization": f"Bearer {token}"} if token else {})},
    )
    assert response.status_code == 401
    # RFC 9728 section 5.1: the 401 says where the resource's metadata is.
    assert (
        'resource_metadata="https://agentfn.test/.well-known/oauth-protected-resource/mcp"'
        in response.headers["WWW-Authenticate"]
    )


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"])
def test_the_protected_resource_metadata_names_the_resource_and_its_issuer(model, gateway, issuer, path):
    for base in (model.url, gateway.url):
        response = httpx2.get(base + path)
        assert response.status_code == 200, response.text
        assert response.json() == {
            "resource": MCP_RESOURCE,
            "authorization_servers": [issuer.url],
            "bearer_methods_supported": ["header"],
            "resource_name": "agentfn MCP tools",
        }
    # The issuer it names serves RFC 8414 metadata with the token endpoint.
    metadata = httpx2.get(issuer.url + "/.well-known/oauth-authorization-server").json()
    assert metadata["issuer"] == issuer.url and metadata["token_endpoint"] == issuer.url + "/token"


def test_mcp_refuses_a_foreign_host_header(model, person):
    response = httpx2.post(
        model.url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={
            "Accept": "application/json, text/event-stream",
            "Host": "attacker.example",
            "Authorization": f"Bearer {person.mcp_token}",
        },
    )
    assert response.status_code == 421


@pytest.fixture(scope="session")
def inspector():
    """The MCP Inspector's CLI from npm, installed once into var/cache (npm is the only thing it needs)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not on this machine: the MCP Inspector CLI cannot be installed")
    prefix = ROOT / "var" / "cache" / "mcp-inspector"
    binary = prefix / "node_modules" / ".bin" / "mcp-inspector"
    if not binary.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), INSPECTOR],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return binary


def inspect(inspector, model, token, *args):
    done = subprocess.run(
        [
            str(inspector),
            "--cli",
            model.url + "/mcp",
            "--transport",
            "http",
            "--header",
            f"Authorization: Bearer {token}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    return done


def test_the_inspector_cli_lists_and_calls_the_tools(inspector, model, person):
    listed = inspect(inspector, model, person.mcp_token, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert sorted(t["name"] for t in json.loads(listed.stdout)["tools"]) == ["list_models", "platform_status"]
    called = inspect(
        inspector,
        model,
        person.mcp_token,
        "--method",
        "tools/call",
        "--tool-name",
        "platform_status",
        "--tool-arg",
        "service=radar",
    )
    assert called.returncode == 0, called.stderr[-2000:]
    result = json.loads(called.stdout)
    assert not result.get("isError") and json.loads(result["content"][0]["text"])["text"].startswith("radar is degraded")
    refused = inspect(inspector, model, "not-a-token", "--method", "tools/list")
    assert refused.returncode != 0


@pytest.mark.parametrize("handler", ["list_tools", "call_tool"])
def test_a_handler_alone_refuses_a_request_whose_token_was_not_verified(handler):
    """The handlers are module-level, as the SDK's examples write them: called without a verified caller, they refuse."""
    from agentfn.model import mcp_handlers

    with pytest.raises(MCPError) as refused:
        asyncio.run(getattr(mcp_handlers, handler)(None, None))
    assert (refused.value.code, refused.value.message) == (-32001, "no valid caller token")
