"""The workload tokens of the local platform's parts, as projected ServiceAccount tokens would be: issued by the dev
issuer, written to each part's own folder of var/secrets and rotated well before they expire."""

from __future__ import annotations

from pathlib import Path

import requests

from .parts import HOST, PORTS, SERVICE_ACCOUNT, account
from .var import Var

ISSUER = f"http://{HOST}:{PORTS['issuer']}"
ROTATION_SECONDS = 1200  # the service token lives an hour; rotated well before, as the kubelet does


def issued(service_account: str, audience: str) -> str:
    """A service account's token for `audience`, from the dev issuer."""
    answer = requests.post(
        f"{ISSUER}/v1/service-tokens",
        json={"account": service_account, "audience": audience},
        timeout=5,
    )
    answer.raise_for_status()
    return answer.json()["token"]


def rotate(var: Var) -> None:
    """The model function's token for WriteEpisode (audience memory's service door), and each exchanging part's
    for the issuer (audience the issuer)."""
    write(var, var.service_token_file, SERVICE_ACCOUNT, "agentfn-memory")
    for part, path in var.exchange_token_files.items():
        write(var, path, SERVICE_ACCOUNT if part == "model" else account(part), ISSUER)


def write(var: Var, path: Path, service_account: str, audience: str) -> None:
    token = issued(service_account, audience)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    var.replace(path, token.encode())  # read on each use: never half a token
