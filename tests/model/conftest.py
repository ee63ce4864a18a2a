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

import pytest
from support.in_process import IN_PROCESS_DAILY, EngineDouble, MemoryDouble, in_process_registry, tool_double
from support.model import (
    tier_env,
)

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
