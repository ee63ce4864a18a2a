"""The tools' test parts: the tool functions under gunicorn, pointed at the dev upstreams (test doubles of the
platform services, on loopback: the `upstreams` fixture of tests/conftest.py)."""

from __future__ import annotations

import secrets

import pytest
from support import READ_TOOLS, Client, Gunicorn
from support.tools import CANARY, RUN_LIMITS, tool_env


@pytest.fixture(scope="session")
def tools(upstreams, issuer, tmp_path_factory):
    """Each read tool under gunicorn, as in a cluster; `.started_in` is its start-to-ready time."""
    logs = tmp_path_factory.mktemp("tool-logs")
    servers = {}
    try:
        for tool in READ_TOOLS:
            server = Gunicorn(
                f"agentfn.{tool}.app:create_app()", tool_env(issuer, tool, upstreams[tool].url), logs / f"{tool}.log"
            )
            server.started_in = server.start()
            servers[tool] = server
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def run_code_env(postgres, issuer):
    return {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": postgres.provision("run_code", "agentfn_run_code"),
        **RUN_LIMITS,
        "AGENTFN_WORKERS": "2",
        "AGENTFN_THREADS": "4",
        "AGENTFN_TEST_CANARY": CANARY,
    }


@pytest.fixture(scope="session")
def run_code(run_code_env, tmp_path_factory):
    server = Gunicorn(
        "agentfn.run_code.app:create_app()", run_code_env, tmp_path_factory.mktemp("run-code-logs") / "run_code.log"
    )
    server.started_in = server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def every_tool(tools, run_code):
    return {**tools, "run_code": run_code}


@pytest.fixture
def coder(run_code, issuer):
    """A fresh caller of run_code each test, so daily runs never carry over."""
    return Client(run_code.url, issuer.tool_headers("run_code", f"coder-{secrets.token_hex(4)}"))
