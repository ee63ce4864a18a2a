"""The checks of the chart's `helm test` pod (`python -m agentfn.cli.probe`), from inside the release's namespace:
the public functions answer /readyz through their Services, GET /v1/agents answers through the gateway with a
caller token, and the page fetcher and the tools do NOT answer (only the model function may reach them: the
NetworkPolicies' promise, as far as a pod that is not the model function can see it).

Configuration: `ProbeSettings` (agentfn.cli.settings; docs/configuration.md).

One line per check on standard output; exit 1 when any fails.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import requests

from .settings import ProbeSettings


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def run(env: Mapping[str, str]) -> list[Check]:
    """Every check the environment names, gateway first (a call through it wakes the model function from zero)."""
    settings = ProbeSettings.from_env(env)
    timeout, checks = settings.timeout_seconds, []
    if gateway := settings.gateway_url.rstrip("/"):
        checks.append(agents_through(gateway, Path(settings.token_file or "").read_text().strip(), timeout))
    checks += [ready(url.rstrip("/"), timeout) for url in settings.ready_urls]
    checks += [closed(url.rstrip("/"), timeout) for url in settings.closed_urls]
    return checks


def agents_through(gateway: str, token: str, timeout: float) -> Check:
    name = f"GET {gateway}/v1/agents"
    try:
        answer = requests.get(f"{gateway}/v1/agents", headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
    except requests.RequestException as error:
        return Check(name, False, f"no answer ({type(error).__name__})")
    if answer.status_code != 200:
        return Check(name, False, f"status {answer.status_code}")
    try:
        agents = answer.json()["agents"]
    except (ValueError, KeyError, TypeError):
        return Check(name, False, "200 but not a list of agents")
    return Check(name, True, f"200, {len(agents)} agents")


def ready(url: str, timeout: float) -> Check:
    name = f"{url}/readyz answers"
    try:
        status = requests.get(f"{url}/readyz", timeout=timeout).status_code
    except requests.RequestException as error:
        return Check(name, False, f"no answer ({type(error).__name__})")
    return Check(name, status == 200, f"status {status}")


def closed(url: str, timeout: float) -> Check:
    name = f"{url} is closed to this pod"
    try:
        status = requests.get(f"{url}/readyz", timeout=timeout).status_code
    except requests.RequestException as error:
        return Check(name, True, f"no answer ({type(error).__name__})")
    return Check(name, False, f"it answered (status {status})")


def main() -> int:
    checks = run(os.environ)
    for check in checks:
        print(check.line(), flush=True)
    if not checks:
        print("FAIL nothing to check: no ready, closed or gateway URL is set (see agentfn.cli.probe)")
        return 1
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
