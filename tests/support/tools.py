"""The tools' test helpers: a read tool's settings against a dev upstream, run_code's small limits, one call."""

from __future__ import annotations

import secrets
import tempfile
from contextlib import contextmanager
from pathlib import Path

import requests

from agentfn.devstack.harness.servers import READ_TOOLS, Gunicorn

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


def tool_env(issuer, tool: str, upstream_url: str, timeout: float = UPSTREAM_TIMEOUT) -> dict[str, str]:
    """A read tool's settings: its upstream, and its own workload token to exchange the caller's for the upstream's."""
    assertion = issuer.assertion_file(Path(tempfile.mkdtemp(prefix="agentfn-tool-")), tool)
    return {
        **issuer.env(),
        READ_TOOLS[tool]: upstream_url,
        "AGENTFN_UPSTREAM_TIMEOUT_SECONDS": str(timeout),
        "AGENTFN_EXCHANGE_TOKEN_FILE": str(assertion),
    }


@contextmanager
def read_tools_served(issuer, upstreams, tools, logs: Path, timeout: float = UPSTREAM_TIMEOUT):
    """These read tools under gunicorn, as in a cluster, each before its dev upstream; `.started_in` is each one's
    start-to-ready time. All stopped at the end."""
    servers = {}
    try:
        for tool in tools:
            server = Gunicorn(
                f"agentfn.{tool}.app:create_app()",
                tool_env(issuer, tool, upstreams[tool].url, timeout),
                logs / f"{tool}.log",
            )
            server.started_in = server.start()
            servers[tool] = server
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def call(url: str, headers: dict, arguments: dict | None = None, **kw) -> requests.Response:
    return requests.post(url + "/v1/call", json={"arguments": arguments or {}}, headers=headers, timeout=30, **kw)
