"""A read tool: its settings (`ReadToolSettings`; docs/configuration.md is written from them:
`python -m agentfn.shared.settings`) and its app: its descriptor and doors (`tool_function`), its work done by the
platform service behind it, called as the caller (`upstream`), and its readiness that service's.

In the settings, `<TOOL>` is the tool's name in capitals: `PLATFORM_STATUS`, `LIST_MODELS`, `RADAR_LATEST`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flask import Flask

from .app import create_app
from .contract import audience
from .exchange import TokenExchange
from .identity import Caller, Identity
from .settings import REQUIRED, Settings, setting
from .tool_function import doors, load_descriptor, openapi
from .upstream import Upstream


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


def read_tool_app(
    package: str,
    env: Mapping[str, str],
    *,
    service: str,
    url_variable: str,
    summarise: Callable[[Upstream, Caller, dict[str, Any]], Any],
    content_schema: dict[str, Any],
) -> Flask:
    """A read tool's app: descriptor, doors, upstream as the caller, readiness = the upstream answers."""
    settings = ReadToolSettings.from_env(env, TOOL=url_variable.removeprefix("AGENTFN_").removesuffix("_UPSTREAM_URL"))
    descriptor = load_descriptor(package)
    name = descriptor["name"]
    upstream = Upstream(
        service,
        settings.upstream_url,
        settings.upstream_timeout_seconds,
        TokenExchange.from_env(env),
        settings.upstream_audience or audience("upstream", name),
    )
    app = create_app(
        f"agentfn.{descriptor['name']}",
        openapi=openapi(descriptor, content_schema, call_problems=(403, 502, 504)),
        readiness={"upstream": upstream.healthy},
        identity=Identity.from_env(env, gateway=False, audience=audience("tool", name)),
        max_request_bytes=settings.max_request_bytes,
    )
    app.register_blueprint(doors(descriptor, lambda caller, arguments: summarise(upstream, caller, arguments)))
    return app
