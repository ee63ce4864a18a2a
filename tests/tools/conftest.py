"""The tools' test parts: the dev upstreams (test doubles of the platform services, on loopback) and the
tool functions under gunicorn, pointed at them."""

from __future__ import annotations

import importlib
import secrets
import tempfile
import threading
from pathlib import Path

import pytest
import requests
from agentfn.cli.postgres import free_port
from support import Client, Gunicorn
from werkzeug.serving import make_server

READ_TOOLS = {
    "platform_status": "AGENTFN_PLATFORM_STATUS_UPSTREAM_URL",
    "list_models": "AGENTFN_LIST_MODELS_UPSTREAM_URL",
    "radar_latest": "AGENTFN_RADAR_LATEST_UPSTREAM_URL",
}
TOOLS = [*READ_TOOLS, "run_code"]
UPSTREAM_TIMEOUT = 1.0
# Limits small enough that every escape attempt ends fast on two shared cores.
RUN_LIMITS = {
    "AGENTFN_RUN_CODE_WALL_SECONDS": "2",
    "AGENTFN_RUN_CODE_CPU_SECONDS": "1",
    "AGENTFN_RUN_CODE_MEMORY_MB": "128",
    "AGENTFN_RUN_CODE_PROCESSES": "16",
    "AGENTFN_RUN_CODE_FILE_MB": "1",
    "AGENTFN_RUN_CODE_OUTPUT_BYTES": "4096",
    "AGENTFN_RUN_CODE_TMPFS_MB": "8",
    "AGENTFN_RUN_CODE_DAILY_RUNS": "5",
    "AGENTFN_RUN_CODE_UID_BASE": "3100000",
}
CANARY = f"canary-{secrets.token_hex(8)}"  # in run_code's environment; a program must never see it


class Served:
    """A WSGI app on a loopback port in this process (the dev upstreams, and tools built by their factory)."""

    def __init__(self, app):
        self.app, self.port = app, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = make_server("127.0.0.1", self.port, app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def controls(self):
        return self.app.extensions["agentfn.dev_upstream"]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def dev_upstream(tool: str, env: dict) -> Served:
    return Served(importlib.import_module(f"agentfn.devstack.{tool}").create_app(env))


@pytest.fixture(scope="session")
def upstreams(issuer):
    served = {tool: dev_upstream(tool, issuer.upstream_env(tool)) for tool in READ_TOOLS}
    yield served
    for s in served.values():
        s.stop()


def tool_env(issuer, tool: str, upstream_url: str) -> dict[str, str]:
    """A read tool's settings: its upstream, and its own workload token to exchange the caller's for the upstream's."""
    assertion = issuer.assertion_file(Path(tempfile.mkdtemp(prefix="agentfn-tool-")), tool)
    return {
        **issuer.env(),
        READ_TOOLS[tool]: upstream_url,
        "AGENTFN_UPSTREAM_TIMEOUT_SECONDS": str(UPSTREAM_TIMEOUT),
        "AGENTFN_EXCHANGE_TOKEN_FILE": str(assertion),
    }


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


@pytest.fixture(autouse=True)
def calm_upstreams(request):
    """Faults a test asked a dev upstream for end with the test."""
    yield
    if "upstreams" in request.fixturenames:
        for served in request.getfixturevalue("upstreams").values():
            served.controls.delay_seconds, served.controls.fail_status = 0, 0


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


def call(url: str, headers: dict, arguments: dict | None = None, **kw) -> requests.Response:
    return requests.post(url + "/v1/call", json={"arguments": arguments or {}}, headers=headers, timeout=30, **kw)


@pytest.fixture
def coder(run_code, issuer):
    """A fresh caller of run_code each test, so daily runs never carry over."""
    return Client(run_code.url, issuer.tool_headers("run_code", f"coder-{secrets.token_hex(4)}"))
