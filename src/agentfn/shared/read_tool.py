"""A read tool's app: its descriptor and doors (`tools`), its work done by the platform service behind it,
called as the caller (`upstream`), and its readiness that service's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask

from .app import create_app
from .contract import audience
from .exchange import TokenExchange
from .identity import Caller, Identity
from .tool_settings import ReadToolSettings
from .tools import doors, load_descriptor, openapi
from .upstream import Upstream


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
