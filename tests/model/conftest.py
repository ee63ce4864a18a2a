"""The model function's test parts, all real but the two test doubles of what lies outside the project:
the scripted engine (the LLM's choices) and the dev upstreams (the platform services behind the tools).

Served on loopback: the scripted engine and the dev upstreams in this process; the tool functions,
memory, the page fetcher and the model function under gunicorn, on the real Postgres.

`loop` is the other way, for the loop's rules in seconds: the model function built in this process by its app
factory, called with Flask's test client, with test doubles of the engine, memory and the tool functions
(support.in_process) around it, on the same Postgres and issuer.
"""

from __future__ import annotations

import json
import secrets
import types
from pathlib import Path

import pytest
from support import MCP_RESOURCE, MODEL_SERVICE, READ_TOOLS, Gunicorn
from support.in_process import IN_PROCESS_DAILY, EngineDouble, MemoryDouble, in_process_registry, tool_double
from support.model import (
    SERVED_READS,
    SMALL_DAILY,
    TOOL_TIMEOUT,
    Engine,
    GatewayServer,
    Person,
    registry_document,
    tier_env,
)
from support.scripted_engine import create_app as engine_app

from agentfn.cli.postgres import free_port
from agentfn.devstack import weights


@pytest.fixture(scope="session")
def engine():
    served = Engine(engine_app())
    yield served
    served.stop()


@pytest.fixture(scope="session")
def logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-logs")


@pytest.fixture(scope="session")
def tools(upstreams, issuer, logs):
    servers = {}
    try:
        for tool in SERVED_READS:
            server = Gunicorn(
                f"agentfn.{tool}.app:create_app()",
                {
                    **issuer.env(),
                    READ_TOOLS[tool]: upstreams[tool].url,
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


@pytest.fixture
def person(issuer):
    return Person(issuer)


@pytest.fixture
def stranger(issuer):
    """A caller in no group: the dev upstreams refuse it (a 403 behind the tool)."""
    return Person(issuer, groups=())


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


# --- the model function in this process ------------------------------------------------------------------


@pytest.fixture(scope="session")
def in_process_model(model_dsn, issuer, tmp_path_factory):
    """The model function from `create_app`, its engine an `EngineDouble`, its memory and tool functions doubles
    served on loopback in this process."""
    from agentfn.model.app import create_app

    directory = tmp_path_factory.mktemp("in-process")
    (directory / "registry.json").write_text(json.dumps(in_process_registry()))
    (directory / "approval-key").write_text(secrets.token_urlsafe(48))
    (directory / "service-token").write_text("service-token-of-the-model-function")  # the memory double takes any
    engine, memory = EngineDouble(), MemoryDouble()
    tools = {
        "platform_status": tool_double(issuer, "platform_status", changes_state=False),
        "close_incident": tool_double(issuer, "close_incident", changes_state=True),
    }
    env = {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": model_dsn,
        "AGENTFN_REGISTRY_FILE": str(directory / "registry.json"),
        "AGENTFN_MEMORY_URL": memory.url,
        "AGENTFN_TOOL_PLATFORM_STATUS_URL": tools["platform_status"].url,
        "AGENTFN_TOOL_CLOSE_INCIDENT_URL": tools["close_incident"].url,
        "AGENTFN_APPROVAL_KEY_FILE": str(directory / "approval-key"),
        "AGENTFN_SERVICE_TOKEN_FILE": str(directory / "service-token"),
        "AGENTFN_EXCHANGE_TOKEN_FILE": str(issuer.assertion_file(directory, "model")),
        "AGENTFN_TIERS": "fast",
        # Never called: the engine is the double.
        **tier_env("fast", "http://127.0.0.1:9/v1", "native"),
        "AGENTFN_DAILY_TOKENS": str(IN_PROCESS_DAILY),
        "AGENTFN_WARM_UP": "0",
    }
    app = create_app(env, engines=engine)
    client = app.test_client()
    assert client.get("/readyz").status_code == 200  # the migrations applied, the registry read
    yield types.SimpleNamespace(client=client, engine=engine, memory=memory, tools=tools, dsn=model_dsn)
    for served in (memory, *tools.values()):
        served.stop()
    app.extensions["agentfn.model"].store.close()


@pytest.fixture
def loop(in_process_model):
    """The in-process model function with its doubles as new: no script, nothing called."""
    in_process_model.engine.script()
    in_process_model.memory.notes, in_process_model.memory.calls, in_process_model.memory.episodes = [], [], []
    for served in in_process_model.tools.values():
        served.app.extensions["calls"].clear()
    return in_process_model
