"""The model function's app factory: `gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.model.app:create_app()'`.

It loads no model: engines are other processes (`python -m agentfn.model.engine_server` is the offline
one), so start-to-ready is Flask, the pool and the registry file. The SDKs a turn or `/mcp` needs are
imported by a warm-up thread once the first answer (the first readiness probe, usually) has gone out.

Configuration (environment), besides identity's (`agentfn.shared.identity`) and the tiers'
(`agentfn.model.engines`: `AGENTFN_TIERS`, `AGENTFN_TIER_<T>_*`):

| name | default | meaning |
|---|---|---|
| `AGENTFN_DATABASE_URL` | (required) | DSN of the model function's own role; its schema is `model` |
| `AGENTFN_REGISTRY_FILE` | `var/registry.json` | the operator's registry (agent -> tools -> who), reloaded on change |
| `AGENTFN_MEMORY_URL` | (none) | memory's base URL: recall, `remember`/`forget`, WriteEpisode; unset: no memory |
| `AGENTFN_PAGE_URL` | (none) | the page fetcher's base URL (`open_page`); unset: no `open_page` |
| `AGENTFN_TOOL_<NAME>_URL` | (none) | a tool function's base URL, e.g. `AGENTFN_TOOL_PLATFORM_STATUS_URL` |
| `AGENTFN_APPROVAL_KEY_FILE` | (none) | the HS256 key (32+ bytes) approval tokens are signed with |
| `AGENTFN_APPROVAL_SECONDS` | `300` | how long an approval token is good for |
| `AGENTFN_MEMORY_AUDIENCE` | `agentfn:memory` | audience of the tokens exchanged for memory (recall, `remember`, `forget`) |
| `AGENTFN_PAGE_AUDIENCE` | `agentfn:page` | audience of the tokens exchanged for the page fetcher |
| `AGENTFN_TOOL_<NAME>_AUDIENCE` | `agentfn:tool:<name>` | audience of the tokens exchanged for a tool function |
| `AGENTFN_MCP_RESOURCE` | `http://127.0.0.1:8800/mcp` | `/mcp`'s public URL: the audience of the tokens it takes (RFC 8707/9728) |
| `AGENTFN_SERVICE_TOKEN_FILE` | `/var/run/secrets/agentfn/memory-token` | its own token for WriteEpisode (read each use) |
| `AGENTFN_DAILY_TOKENS` | `200000` | tokens per caller per UTC day, all turns and session ends together |
| `AGENTFN_TOOL_TIMEOUT_SECONDS` | `15` | one tool call's bound (the turn's deadline may cut it shorter) |
| `AGENTFN_TOOL_RESULT_CHARS` | `8000` | characters of a tool's result the model reads |
| `AGENTFN_DESCRIPTOR_TTL_SECONDS` | `300` | how long a tool function's descriptor is kept |
| `AGENTFN_RECALL_LIMIT` | `5` | entries recalled for a turn (memory caps it at 5) |
| `AGENTFN_RECALL_MAX_TOKENS` | `800` | token cap of the recalled block |
| `AGENTFN_EPISODE_TIER` | `fast` | the tier that summarises a session |
| `AGENTFN_MCP_ALLOWED_HOSTS` | `127.0.0.1:*,localhost:*,[::1]:*` | Host headers `/mcp` answers (DNS rebinding) |
| `AGENTFN_MCP_ALLOWED_ORIGINS` | `http://127.0.0.1:*,http://localhost:*,http://[::1]:*` | browser Origins `/mcp` accepts |
| `AGENTFN_WARM_UP` | `1` | `0`: import the SDKs on first use instead of after the first answer |
| `AGENTFN_MAX_REQUEST_BYTES` | `262144` | larger bodies get 413 |
| `AGENTFN_DB_POOL_SIZE` | `8` | connections per process |
| `AGENTFN_LOG_LEVEL` | `INFO` | log level |
| `AGENTFN_ADMIN_GROUPS` | `platform-admins` | comma-separated groups whose callers may use the admin doors (`/v1/admin/*`); empty: no one |
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping

from agentfn.shared import app as http
from agentfn.shared.exchange import TokenExchange
from agentfn.shared.identity import Identity
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from . import admin
from .approvals import Approvals
from .clients import Http
from .engines import tiers_from_env
from .mcp_server import LazyMCP, build, protected_resource
from .memory_client import MemoryClient
from .registry import Registry
from .routes import bp
from .schemas import openapi
from .services import Limits, Services
from .store import Store
from .tools import ToolTable

TOOL_URL = re.compile(r"^AGENTFN_TOOL_([A-Z0-9_]+)_URL$")
TOOL_AUDIENCE = re.compile(r"^AGENTFN_TOOL_([A-Z0-9_]+)_AUDIENCE$")
MCP_RESOURCE = "http://127.0.0.1:8800/mcp"  # the dev gateway's /mcp


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def services_from_env(env: Mapping[str, str]) -> Services:
    store = Store(env["AGENTFN_DATABASE_URL"], pool_size=int(env.get("AGENTFN_DB_POOL_SIZE", "8")))
    web = Http(maxsize=32)
    tool_urls = {m.group(1).lower(): v for k, v in env.items() if (m := TOOL_URL.match(k)) and v.strip()}
    memory_url = env.get("AGENTFN_MEMORY_URL") or None
    tokens = TokenExchange.from_env(env)
    audiences = {m.group(1).lower(): v.strip() for k, v in env.items() if (m := TOOL_AUDIENCE.match(k)) and v.strip()}
    audiences.update(
        {
            part: env[f"AGENTFN_{part.upper()}_AUDIENCE"].strip()
            for part in ("page", "memory")
            if env.get(f"AGENTFN_{part.upper()}_AUDIENCE", "").strip()
        }
    )
    tools = ToolTable(
        tool_urls=tool_urls,
        page_url=env.get("AGENTFN_PAGE_URL") or None,
        memory_url=memory_url,
        store=store,
        timeout=float(env.get("AGENTFN_TOOL_TIMEOUT_SECONDS", "15")),
        result_chars=int(env.get("AGENTFN_TOOL_RESULT_CHARS", "8000")),
        descriptor_ttl=float(env.get("AGENTFN_DESCRIPTOR_TTL_SECONDS", "300")),
        http=web,
        tokens=tokens,
        audiences=audiences,
    )
    memory = MemoryClient(
        memory_url,
        env.get("AGENTFN_SERVICE_TOKEN_FILE", "/var/run/secrets/agentfn/memory-token"),
        web,
        tokens,
        tools.audience("memory"),
    )
    limits = Limits(
        daily_tokens=int(env.get("AGENTFN_DAILY_TOKENS", "200000")),
        recall_limit=int(env.get("AGENTFN_RECALL_LIMIT", "5")),
        recall_max_tokens=int(env.get("AGENTFN_RECALL_MAX_TOKENS", "800")),
        episode_tier=env.get("AGENTFN_EPISODE_TIER", "fast"),
    )
    approvals = Approvals(env.get("AGENTFN_APPROVAL_KEY_FILE") or None, int(env.get("AGENTFN_APPROVAL_SECONDS", "300")))
    return Services(
        Registry(env.get("AGENTFN_REGISTRY_FILE", "var/registry.json")),
        store,
        tools,
        tiers_from_env(env),
        memory,
        limits,
        approvals,
    )


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    identity = Identity.from_env(env)
    services = services_from_env(env)
    max_bytes = int(env.get("AGENTFN_MAX_REQUEST_BYTES", str(256 * 1024)))

    app = http.create_app(
        "agentfn.model",
        openapi=openapi(),
        database=services.store,
        readiness={"registry": services.registry.ready},
        identity=identity,
        max_request_bytes=max_bytes,
    )
    app.extensions["agentfn.model"] = services
    app.extensions[admin.GROUPS] = frozenset(_csv(env.get("AGENTFN_ADMIN_GROUPS", "platform-admins")))

    app.register_blueprint(bp)
    app.register_blueprint(admin.bp)
    resource = env.get("AGENTFN_MCP_RESOURCE", "").strip() or MCP_RESOURCE
    app.register_blueprint(protected_resource(resource, [identity.caller.trust.issuer]))
    mcp = LazyMCP(
        lambda: build(
            services,
            identity.verifier_for(resource),
            resource,
            _csv(env.get("AGENTFN_MCP_ALLOWED_HOSTS", "127.0.0.1:*,localhost:*,[::1]:*")),
            _csv(env.get("AGENTFN_MCP_ALLOWED_ORIGINS", "http://127.0.0.1:*,http://localhost:*,http://[::1]:*")),
            max_bytes,
        )
    )
    app.extensions["agentfn.model.mcp"] = mcp
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/mcp": mcp})
    if env.get("AGENTFN_WARM_UP", "1") != "0":
        once = threading.Event()

        @app.after_request
        def warm_after_first_answer(response):
            # Not before: the warm-up's imports would hold the GIL while the process is getting ready.
            if not once.is_set():
                once.set()
                response.call_on_close(
                    lambda: threading.Thread(target=_warm, args=(services, mcp), name="warm-up", daemon=True).start()
                )
            return response

    return app


def _warm(services: Services, mcp: LazyMCP) -> None:
    from . import episodes, routes

    for step in (routes.warm, services.warm, mcp.warm, lambda: episodes.language("warm up")):
        try:
            step()
        except Exception:  # a failed warm-up is retried by the first request that needs it
            pass
