"""The read tools' settings (docs/configuration.md is written from them:
`python -m agentfn.shared.settings`). `<TOOL>` is the tool's name in capitals: `PLATFORM_STATUS`,
`LIST_MODELS`, `RADAR_LATEST`."""

from __future__ import annotations

from dataclasses import dataclass

from .settings import REQUIRED, Settings, setting


@dataclass(frozen=True)
class ReadToolSettings(Settings):
    upstream_url: str = setting(
        "AGENTFN_<TOOL>_UPSTREAM_URL", REQUIRED, "base URL of the platform service behind the read tool"
    )
    upstream_audience: str | None = setting(
        "AGENTFN_<TOOL>_UPSTREAM_AUDIENCE",
        None,
        "audience of the token the tool exchanges for its platform service (the exchange: token exchange's settings)",
        shown="`agentfn:upstream:<tool>`",
    )
    upstream_timeout_seconds: float = setting(
        "AGENTFN_UPSTREAM_TIMEOUT_SECONDS", 5.0, "connect and read timeout of one call to it", minimum=0.1
    )
    max_request_bytes: int = setting("AGENTFN_MAX_REQUEST_BYTES", 16 * 1024, "larger bodies get 413", minimum=1024)
