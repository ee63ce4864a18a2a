"""The parts of the local platform and where they listen: `Part`, the ports table (`PORTS`), the service accounts
and the names the parts share. Pure data: nothing here starts anything."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .settings import CliSettings

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[3]  # the source tree: src/agentfn/cli/ is three below it
HOST = "127.0.0.1"
SERVICE_ACCOUNT = "system:serviceaccount:agentfn:agentfn-model"
WORKBENCH = "agentfn-workbench"  # the workbench's public client at the issuer
ADMINS = "platform-admins"  # the group the admin doors (and the workbench's admin page) are for
TOUR = ("alice", "developers,platform-users")  # the person of README's tour, as the banner's token line names them
MODEL_SERVICE_AUDIENCE = "agentfn-model"  # the model function's service door (the engines' warm-up), not memory's


def account(part: str) -> str:
    """The service account a part runs as, as in the chart (`agentfn-<part>` in namespace agentfn)."""
    return f"system:serviceaccount:agentfn:agentfn-{part.replace('_', '-')}"


# The gateway on the base port and the parts above it: AGENTFN_DEV_PORT_BASE moves them all.
BASE = CliSettings.from_env().dev_port_base
READS = ("platform_status", "list_models", "radar_latest")
PORTS = {
    "gateway": BASE,
    "issuer": BASE + 1,
    "memory": BASE + 2,
    "page": BASE + 3,
    "model": BASE + 4,
    "engine": BASE + 5,
    "workbench": BASE + 6,
    **{tool: BASE + 10 + n for n, tool in enumerate((*READS, "run_code"))},
    **{f"{tool}-upstream": BASE + 20 + n for n, tool in enumerate(READS)},
    "postgres": BASE + 99,
}
# Parts with a schema of their own: schema -> role.
ROLES = {"memory": "agentfn_memory", "page": "agentfn_page", "run_code": "agentfn_run_code", "model": "agentfn_model"}


@dataclass
class Part:
    name: str
    app: str  # a gunicorn app spec, or for `argv` parts a label
    port: int | None
    env: dict[str, str] = field(default_factory=dict)
    doing: str = ""  # what its start is busy with, for the progress line
    ready: str = "/readyz"
    ready_status: int = 200
    argv: list[str] | None = None  # a plain process instead of gunicorn
    ready_file: Path | None = None  # for plain processes: ready when this file exists
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((HOST, port)) == 0
