"""The local platform's settings: the `agentfn` CLI, `agentfn up`, the dev gateway and the chart's probe
(docs/configuration.md is written from them: `python -m agentfn.shared.settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from agentfn.shared.settings import REQUIRED, Settings, setting


@dataclass(frozen=True)
class CliSettings(Settings):
    dev_port_base: int = setting(
        "AGENTFN_DEV_PORT_BASE", 8800, "`agentfn up`: the parts listen on this base + 1..99", minimum=1, maximum=65400
    )
    issuer_url: str | None = setting(
        "AGENTFN_ISSUER_URL", None, "where `agentfn token` asks the dev issuer", shown="`http://127.0.0.1:8801`"
    )
    url: str | None = setting(
        "AGENTFN_URL",
        None,
        "the gateway the `agentfn` CLI calls (`--url`)",
        shown="`http://127.0.0.1:8800` (the local gateway, on `AGENTFN_DEV_PORT_BASE`)",
    )
    token: str | None = setting(
        "AGENTFN_TOKEN", None, "the caller token the `agentfn` CLI sends (`--token`); never written anywhere"
    )
    registry_file: str = setting(
        "AGENTFN_REGISTRY_FILE", "var/registry/registry.json", "`agentfn audit`: the registry file it reads by default"
    )


@dataclass(frozen=True)
class GatewaySettings(Settings):
    """The dev gateway (`agentfn.cli.gateway`)."""

    memory_url: str = setting(
        "AGENTFN_GATEWAY_MEMORY_URL", REQUIRED, "the dev gateway (`agentfn.cli.gateway`): where memory's public doors go"
    )
    model_url: str = setting(
        "AGENTFN_GATEWAY_MODEL_URL", REQUIRED, "the dev gateway: where the model function's public doors go"
    )
    workbench_url: str | None = setting(
        "AGENTFN_GATEWAY_WORKBENCH_URL",
        None,
        "the dev gateway: where the workbench page (`/`, `/assets/*`, `/workbench.json`) goes",
        shown="(none: the site root is 404)",
    )


@dataclass(frozen=True)
class ProbeSettings(Settings):
    """The `helm test` probe (`agentfn.cli.probe`); the chart sets them."""

    ready_urls: tuple[str, ...] = setting(
        "AGENTFN_PROBE_READY_URLS",
        (),
        "the `helm test` probe (`agentfn.cli.probe`; the chart sets its settings): base URLs whose `/readyz` must "
        "answer 200, comma-separated",
    )
    closed_urls: tuple[str, ...] = setting(
        "AGENTFN_PROBE_CLOSED_URLS", (), "the probe: base URLs that must not answer at all, comma-separated"
    )
    gateway_url: str = setting(
        "AGENTFN_PROBE_GATEWAY_URL", "", "the probe's `GET /v1/agents` through the gateway; empty: no such check"
    )
    token_file: str | None = setting(
        "AGENTFN_PROBE_TOKEN_FILE", None, "the file with the caller token for that check (never printed)"
    )
    timeout_seconds: float = setting(
        "AGENTFN_PROBE_TIMEOUT_SECONDS",
        5.0,
        "how long each of the probe's requests waits (a function that must not answer is given this long)",
        minimum=0.1,
    )
