"""The model function's test helpers: the scripted engine's client, the registry the tests serve, a caller, a
turn and its events, and the `agentfn` CLI run as a person runs it."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time

import jwt
import requests

from agentfn.devstack.harness.identity import MODEL_SERVICE, account
from agentfn.devstack.harness.servers import BIN, Gunicorn, Served
from agentfn.shared.contract import audience
from support import MCP_RESOURCE, STATEFUL_TOOLS

EVERYONE = "system:authenticated"
SERVED_READS = ("platform_status", "list_models")  # the read tools the model function's tests serve and name
TOOL_TIMEOUT = 1.5  # the model function's bound on one tool call (the tool's own upstream timeout is longer)
AGENTFN = BIN / "agentfn"  # the CLI
SMALL_DAILY = 9000  # a round of an agent with six tools holds about 7,000 (the listings and worked replies, in bytes)


class Engine(Served):
    """The scripted engine (a test double of an LLM's choices) in this process."""

    def script(self, *rounds: dict) -> str:
        """A script id; put `script:<id>` in the person's message."""
        return requests.post(self.url + "/scripts", json={"rounds": list(rounds)}, timeout=5).json()["id"]

    def requests(self, sid: str) -> list[dict]:
        return requests.get(f"{self.url}/scripts/{sid}/requests", timeout=5).json()["requests"]

    def unscripted(self) -> list[dict]:
        """The last requests that named no script, oldest first."""
        return requests.get(f"{self.url}/unscripted", timeout=5).json()["requests"]

    def slow_unscripted(self, delay: float, times: int = 1) -> None:
        """Answer the next `times` requests that name no script after `delay` seconds."""
        requests.post(f"{self.url}/unscripted", json={"delay": delay, "times": times}, timeout=5).raise_for_status()


def access(groups=(), subjects=(), limit=None, grant="agentfn/test", approval="required"):
    return {"subjects": list(subjects), "groups": list(groups), "dailyLimit": limit, "grant": grant, "approval": approval}


def agent(brief, tier, memory, tools, steps=4, tokens=60000, deadline=30):
    return {
        "object": f"agentfn/{brief[:10].lower().replace(' ', '-')}",
        "brief": brief,
        "tier": tier,
        "memory": memory,
        "limits": {"steps": steps, "tokensPerTurn": tokens, "deadlineSeconds": deadline},
        "tools": tools,
    }


def registry_document() -> dict:
    """A registry as the operator writes it (the tests check it against src/agentfn/shared/contract/registry.schema.json)."""
    everyone, users, devs = access([EVERYONE]), access(["platform-users"]), access(["developers"])
    # The reviewer and the keeper run what changes state without asking (their grants waive approval: the
    # memory and run_code cases are about memory and code); the asker's grants leave approval required.
    waived = access(["developers"], approval="waived")
    reviewer_tools = {
        "platform_status": everyone,
        "list_models": users,
        "open_page": devs,
        "run_code": waived,
        "remember": waived,
        "forget": waived,
    }
    asker_tools = {**reviewer_tools, "run_code": devs, "remember": devs, "forget": devs}
    agents = {}
    for suffix, tier in (("", "fast"), ("-small", "small")):
        agents["reviewer" + suffix] = agent("Reviews code with the person.", tier, "preferences", reviewer_tools)
        agents["keeper" + suffix] = agent("Remembers facts and preferences.", tier, "facts", reviewer_tools)
        agents["asker" + suffix] = agent("Asks before it changes anything.", tier, "facts", asker_tools)
        agents["guide" + suffix] = agent("Guides visitors; keeps nothing.", tier, "none", {"platform_status": everyone}, 2)
        agents["hasty" + suffix] = agent("Answers fast.", tier, "none", {"platform_status": everyone}, deadline=1)
        agents["frugal" + suffix] = agent("Spends little.", tier, "none", {"platform_status": everyone}, tokens=1500)
        counted = access([EVERYONE], limit=2, grant=f"agentfn/counted{suffix}")
        agents["counted" + suffix] = agent("Counts its calls.", tier, "none", {"platform_status": counted})
    # On the real offline engine (test_offline_engine.py): one step, then the answer.
    agents["offline"] = agent(
        "You check the platform for the person. Always begin by calling the tool: reply "
        '{"tool": "platform_status", "arguments": {}}. After its result, answer in one sentence.',
        "offline",
        "preferences",
        {"platform_status": everyone},
        steps=1,
        deadline=240,
    )
    agents["secret"] = agent("Only for one person.", "fast", "none", {"platform_status": access(subjects=["nobody-else"])})
    body = {
        "agents": agents,
        "alone": {
            "platform_status": everyone,
            "list_models": users,
            "run_code": everyone,
            "open_page": everyone,
            "remember": everyone,
        },
        "mcp": {"platform_status": everyone, "list_models": users, "run_code": everyone, "forget": everyone},
    }
    return {"apiVersion": "agentfn.dev/v1alpha1", "kind": "Registry", "revision": "sha256:" + "0" * 64, **body}


def stateful_tool(issuer, name: str) -> Served:
    """A tool function built as every one is (`shared.app`, `shared.tool_function.doors`), of another team: its
    descriptor offers it alone and over MCP and says it changes state, or does not say (`STATEFUL_TOOLS`). The calls
    that reach it are kept in `app.extensions["calls"]`."""
    from agentfn.shared.app import create_app
    from agentfn.shared.identity import Identity
    from agentfn.shared.tool_function import check_descriptor, doors, openapi

    descriptor = check_descriptor(
        {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()}.",
            "input_schema": {"type": "object", "additionalProperties": False, "properties": {}},
            "callable_alone": True,
            "mcp": True,
            **STATEFUL_TOOLS[name],
        }
    )
    calls: list[str] = []
    app = create_app(
        f"agentfn.{name}",
        openapi=openapi(descriptor, {"type": "object"}, call_problems=()),
        readiness={},
        identity=Identity.from_env(issuer.env(), gateway=False, audience=audience("tool", name)),
    )
    app.register_blueprint(doors(descriptor, lambda caller, arguments: calls.append(caller.subject) or {"done": True}))
    app.extensions["calls"] = calls
    return Served(app)


def tier_env(name: str, url: str, mode: str, **extra) -> dict[str, str]:
    prefix = f"AGENTFN_TIER_{name.upper()}_"
    env = {
        prefix + "URL": url,
        prefix + "MODEL": "scripted",
        prefix + "TOOL_MODE": mode,
        prefix + "DEADLINE_SECONDS": "20",
        prefix + "MAX_TOKENS": "256",
        prefix + "CONTEXT_TOKENS": "8192",
    }
    return {**env, **{prefix + k: v for k, v in extra.items()}}


class Person:
    """A caller: a fresh subject, its groups, its gateway token (kept to compare what reaches a tool) and its
    token for /mcp (audience the MCP resource, as an MCP client gets it)."""

    def __init__(self, issuer, groups=("platform-users", "developers")):
        self.subject = f"person-{secrets.token_hex(4)}"
        self.groups = list(groups)
        self.token = issuer.caller_token(self.subject, list(groups))
        self.mcp_token = issuer.caller_token(self.subject, list(groups), audience=MCP_RESOURCE)
        self.headers = {"Authorization": f"Bearer {self.token}"}


def exchanged_for_upstream(token: str, who: Person, tool: str) -> bool:
    """Whether what a dev upstream received is the caller's token exchanged twice (model function, then the tool)
    for that upstream, and not the caller's own (read, not verified: the upstream verified it)."""
    claims = jwt.decode(token, options={"verify_signature": False})
    return (
        token not in (who.token, who.mcp_token)
        and claims["sub"] == who.subject
        and claims["groups"] == who.groups
        and claims["aud"] == audience("upstream", tool)
        and claims["act"] == {"sub": account(tool), "act": {"sub": MODEL_SERVICE}}
    )


def parse_sse(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.split("\n\n"):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if name:
            events.append((name, json.loads("\n".join(data))))
    return events


def take_turn(base: str, who: Person, agent_name: str, content: str, *, history=(), timeout=60, **body):
    response = requests.post(
        f"{base}/v1/agents/{agent_name}/turns",
        headers=who.headers,
        timeout=timeout,
        json={"messages": [*history, {"role": "user", "content": content}], **body},
    )
    events = parse_sse(response.text) if response.headers.get("Content-Type", "").startswith("text/event-stream") else None
    return response, events


class GatewayServer(Gunicorn):
    """The dev gateway (agentfn.cli.gateway) under gunicorn: it has no /readyz of its own (that path is not a door)."""

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the gateway exited; see {self.log}:\n{self.log.read_text()[-3000:]}")
            try:
                requests.get(self.url + "/readyz", timeout=2)
                return
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.05)
        raise RuntimeError(f"the gateway not ready in {timeout}s; see {self.log}")


def agentfn(
    *args: str,
    url: str | None = None,
    token: str | None = None,
    stdin: str | None = None,
    timeout: float = 90,
    columns: int = 200,
) -> subprocess.CompletedProcess:
    """The CLI as a subprocess, its URL and token given or unset (never the ones of the environment running the tests)."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTFN_URL", "AGENTFN_TOKEN")}
    env.update(
        {"COLUMNS": str(columns), **({"AGENTFN_URL": url} if url else {}), **({"AGENTFN_TOKEN": token} if token else {})}
    )
    return subprocess.run([str(AGENTFN), *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout)


# What the platform says before the person's last message: the recalled notes (a block and its line of use) and the
# language to answer in, then a blank line.
FRAME = re.compile(r"\A(?:<notes>\n.*?\n</notes>\n[^\n]*\n?)?(?:Answer in [A-Z][a-z]+\.)?\n\n", re.S)


def persons_words(content: str) -> str:
    """A message the engine read as the person's, without what the platform said before it."""
    return FRAME.sub("", content, count=1)


def door(gateway, who, path, **params):
    """GET one of the platform's doors through the gateway as `who`."""
    return requests.get(gateway.url + path, params=params, headers=who.headers, timeout=30)
