"""The tools' test helpers: a read tool's settings against a dev upstream, run_code's small limits, one call."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

import requests

from agentfn.devstack.harness.servers import READ_TOOLS

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


def tool_env(issuer, tool: str, upstream_url: str) -> dict[str, str]:
    """A read tool's settings: its upstream, and its own workload token to exchange the caller's for the upstream's."""
    assertion = issuer.assertion_file(Path(tempfile.mkdtemp(prefix="agentfn-tool-")), tool)
    return {
        **issuer.env(),
        READ_TOOLS[tool]: upstream_url,
        "AGENTFN_UPSTREAM_TIMEOUT_SECONDS": str(UPSTREAM_TIMEOUT),
        "AGENTFN_EXCHANGE_TOKEN_FILE": str(assertion),
    }


def call(url: str, headers: dict, arguments: dict | None = None, **kw) -> requests.Response:
    return requests.post(url + "/v1/call", json={"arguments": arguments or {}}, headers=headers, timeout=30, **kw)
