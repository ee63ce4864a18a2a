"""The model function's test parts, all real but the two test doubles of what lies outside the project:
the scripted engine (the LLM's choices) and the dev upstreams (the platform services behind the tools).

Served on loopback: the scripted engine and the dev upstreams in this process; the tool functions,
memory, the page fetcher and the model function under gunicorn, on the real Postgres.
"""

from __future__ import annotations

import importlib
import json
import secrets
import sys
import threading
import time
from pathlib import Path

import jwt
import pytest
import requests
from agentfn.cli.postgres import free_port
from agentfn.model import weights
from support import MCP_RESOURCE, Gunicorn, account
from werkzeug.serving import make_server

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripted engine beside this file
from scripted_engine import create_app as engine_app  # noqa: E402

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"  # the account memory trusts (tests/conftest.py)
EVERYONE = "system:authenticated"
READ_TOOLS = {"platform_status": "AGENTFN_PLATFORM_STATUS_UPSTREAM_URL", "list_models": "AGENTFN_LIST_MODELS_UPSTREAM_URL"}
TOOL_TIMEOUT = 1.5  # the model function's bound on one tool call (the tool's own upstream timeout is longer)


class Served:
    """A WSGI app on a loopback port in this process."""

    def __init__(self, app):
        self.app, self.port = app, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = make_server("127.0.0.1", self.port, app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Engine(Served):
    def script(self, *rounds: dict) -> str:
        """A script id; put `script:<id>` in the person's message."""
        return requests.post(self.url + "/scripts", json={"rounds": list(rounds)}, timeout=5).json()["id"]

    def requests(self, sid: str) -> list[dict]:
        return requests.get(f"{self.url}/scripts/{sid}/requests", timeout=5).json()["requests"]


@pytest.fixture(scope="session")
def engine():
    served = Engine(engine_app())
    yield served
    served.stop()


@pytest.fixture(scope="session")
def upstreams(issuer):
    served = {
        t: Served(importlib.import_module(f"agentfn.devstack.{t}").create_app(issuer.upstream_env(t))) for t in READ_TOOLS
    }
    yield served
    for s in served.values():
        s.stop()


@pytest.fixture(autouse=True)
def calm_upstreams(request):
    """Faults a test asked a dev upstream for end with the test."""
    yield
    if "upstreams" in request.fixturenames:
        for s in request.getfixturevalue("upstreams").values():
            controls = s.app.extensions["agentfn.dev_upstream"]
            controls.delay_seconds, controls.fail_status = 0, 0


@pytest.fixture(scope="session")
def logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-logs")


@pytest.fixture(scope="session")
def tools(upstreams, issuer, logs):
    servers = {}
    try:
        for tool, variable in READ_TOOLS.items():
            server = Gunicorn(
                f"agentfn.{tool}.app:create_app()",
                {
                    **issuer.env(),
                    variable: upstreams[tool].url,
                    "AGENTFN_UPSTREAM_TIMEOUT_SECONDS": "5",
                    "AGENTFN_EXCHANGE_TOKEN_FILE": str(issuer.assertion_file(logs, tool)),
                },
                logs / f"{tool}.log",
            )
            server.start()
            servers[tool] = server
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def page(postgres, issuer, logs):
    server = Gunicorn(
        "agentfn.page.app:create_app()",
        {**issuer.env(), "AGENTFN_DATABASE_URL": postgres.provision("page", "agentfn_page")},
        logs / "page.log",
    )
    server.start()
    yield server
    server.stop()


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
    """A registry as the operator writes it (the tests check it against shared/contract/registry.schema.json)."""
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


@pytest.fixture(scope="session")
def registry_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("registry") / "registry.json"
    path.write_text(json.dumps(registry_document()))
    return path


@pytest.fixture(scope="session")
def service_token_file(issuer, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "memory-token"
    path.write_text(issuer.service_token(MODEL_SERVICE))
    return path


@pytest.fixture(scope="session")
def approval_key_file(tmp_path_factory) -> Path:
    """The key approval tokens are signed with, as the chart's Secret or the dev stack's file holds it."""
    path = tmp_path_factory.mktemp("approval") / "approval-key"
    path.write_text(secrets.token_urlsafe(48))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def exchange_token_file(issuer, tmp_path_factory) -> Path:
    """The model function's workload token for the issuer (client authentication of its token exchanges)."""
    return issuer.assertion_file(tmp_path_factory.mktemp("secrets"), "model")


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


@pytest.fixture(scope="session")
def offline_port() -> int:
    """Where the real offline engine listens when test_offline_engine.py starts it (the tier is configured ahead)."""
    return free_port()


@pytest.fixture(scope="session")
def model_env(
    model_dsn,
    issuer,
    engine,
    tools,
    memory,
    page,
    registry_file,
    service_token_file,
    offline_port,
    approval_key_file,
    exchange_token_file,
):
    return {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": model_dsn,
        "AGENTFN_REGISTRY_FILE": str(registry_file),
        "AGENTFN_MEMORY_URL": memory.url,
        "AGENTFN_PAGE_URL": page.url,
        "AGENTFN_TOOL_PLATFORM_STATUS_URL": tools["platform_status"].url,
        "AGENTFN_TOOL_LIST_MODELS_URL": tools["list_models"].url,
        "AGENTFN_SERVICE_TOKEN_FILE": str(service_token_file),
        "AGENTFN_TIERS": "fast,small,offline",
        "AGENTFN_APPROVAL_KEY_FILE": str(approval_key_file),
        "AGENTFN_EXCHANGE_TOKEN_FILE": str(exchange_token_file),
        "AGENTFN_MCP_RESOURCE": MCP_RESOURCE,
        **tier_env("fast", engine.url + "/v1", "native"),
        **tier_env("small", engine.url + "/v1", "constrained"),
        **tier_env(
            "offline",
            f"http://127.0.0.1:{offline_port}/v1",
            "constrained",
            MODEL=weights.chosen().alias,
            DEADLINE_SECONDS="240",
            MAX_TOKENS="40",
            CONTEXT_TOKENS="2048",
            TEMPERATURE="0",
        ),
        "AGENTFN_TOOL_TIMEOUT_SECONDS": str(TOOL_TIMEOUT),
        "AGENTFN_THREADS": "8",
        "AGENTFN_LOG_LEVEL": "INFO",
    }


@pytest.fixture(scope="session")
def model(model_env, logs):
    server = Gunicorn("agentfn.model.app:create_app()", model_env, logs / "model.log")
    server.started_in = server.start()
    yield server
    server.stop()


SMALL_DAILY = 5000  # a round of an agent with six tools holds about 3,500 (the listings' bytes)


@pytest.fixture(scope="session")
def frugal_model(model_env, logs):
    """The model function with a small daily budget, in two processes, for the budget cases."""
    env = {
        **model_env,
        "AGENTFN_DAILY_TOKENS": str(SMALL_DAILY),
        "AGENTFN_WORKERS": "2",
        "AGENTFN_THREADS": "12",
        **tier_env("fast", model_env["AGENTFN_TIER_FAST_URL"], "native", MAX_TOKENS="100"),
        **tier_env("small", model_env["AGENTFN_TIER_SMALL_URL"], "constrained", MAX_TOKENS="100"),
    }
    server = Gunicorn("agentfn.model.app:create_app()", env, logs / "model-frugal.log")
    server.start()
    yield server
    server.stop()


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
        and claims["aud"] == f"agentfn:upstream:{tool}"
        and claims["act"] == {"sub": account(tool), "act": {"sub": MODEL_SERVICE}}
    )


@pytest.fixture
def person(issuer):
    return Person(issuer)


@pytest.fixture
def stranger(issuer):
    """A caller in no group: the dev upstreams refuse it (a 403 behind the tool)."""
    return Person(issuer, groups=())


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
    """The dev gateway (cli/gateway.py) under gunicorn: it has no /readyz of its own (that path is not a door)."""

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


@pytest.fixture(scope="session")
def gateway(memory, model, workbench, logs):
    """The one public URL: the dev gateway in front of memory, the model function and the workbench."""
    server = GatewayServer(
        "agentfn.cli.gateway:create_app()",
        {
            "AGENTFN_GATEWAY_MEMORY_URL": memory.url,
            "AGENTFN_GATEWAY_MODEL_URL": model.url,
            "AGENTFN_GATEWAY_WORKBENCH_URL": workbench.url,
        },
        logs / "gateway.log",
    )
    server.start()
    yield server
    server.stop()
