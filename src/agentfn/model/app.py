"""The model function's app factory: `gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.model.app:create_app()'`.

It loads no model: engines are other processes (`python -m agentfn.devstack.engine_server` is the offline
one), so start-to-ready is Flask, the pool and the registry file. The SDKs a turn or `/mcp` needs are
imported by a warm-up thread once the first answer (the first readiness probe, usually) has gone out.

Configuration: `ModelSettings`, one `ToolFunctionSettings` per tool function and the tiers' (agentfn.model.settings;
docs/configuration.md), and identity's.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping

from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from agentfn.shared import app as http
from agentfn.shared.exchange import TokenExchange
from agentfn.shared.identity import Identity

from . import admin
from .approvals import Approvals
from .engines import Engine, Tier, tiers_from_env
from .mcp_server import LazyMCP, build, protected_resource
from .memory_client import MemoryClient
from .parts_http import Http
from .registry import Registry
from .routes import bp
from .schemas import openapi
from .services import Services, TurnLimits
from .settings import ModelSettings, ToolFunctionSettings
from .store import Store
from .tool_table import ToolTable

# The tool functions are the ones the environment names: AGENTFN_TOOL_<NAME>_URL (or _AUDIENCE) for each.
TOOL_SETTING = re.compile(r"^AGENTFN_TOOL_([A-Z0-9_]+)_(?:URL|AUDIENCE)$")


def services_from_env(
    env: Mapping[str, str], settings: ModelSettings, engines: Callable[[Tier], Engine] = Engine
) -> Services:
    store = Store(settings.database_url, pool_size=settings.db_pool_size)
    web = Http(maxsize=32)
    named = {m.group(1) for k in env if (m := TOOL_SETTING.match(k))}
    tool_settings = {name.lower(): ToolFunctionSettings.from_env(env, NAME=name) for name in sorted(named)}
    tool_urls = {name: s.url for name, s in tool_settings.items() if s.url}
    tokens = TokenExchange.from_env(env)
    audiences = {name: s.audience for name, s in tool_settings.items() if s.audience}
    audiences |= {"page": settings.page_audience, "memory": settings.memory_audience}
    tools = ToolTable(
        tool_urls=tool_urls,
        page_url=settings.page_url,
        memory_url=settings.memory_url,
        store=store,
        timeout=settings.tool_timeout_seconds,
        result_chars=settings.tool_result_chars,
        descriptor_ttl=settings.descriptor_ttl_seconds,
        http=web,
        tokens=tokens,
        audiences=audiences,
    )
    memory = MemoryClient(settings.memory_url, settings.service_token_file, web, tokens, tools.audience("memory"))
    limits = TurnLimits(
        daily_tokens=settings.daily_tokens,
        recall_limit=settings.recall_limit,
        recall_max_tokens=settings.recall_max_tokens,
        episode_tier=settings.episode_tier,
    )
    approvals = Approvals(settings.approval_key_file, settings.approval_seconds)
    return Services(
        Registry(settings.registry_file),
        store,
        tools,
        tiers_from_env(env),
        memory,
        limits,
        approvals,
        make_engine=engines,
    )


def create_app(env: Mapping[str, str] | None = None, *, engines: Callable[[Tier], Engine] = Engine) -> Flask:
    """`engines` builds a tier's engine from the tier; the tests' in-process app passes a stand-in for the engine."""
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    identity = Identity.from_env(env)
    settings = ModelSettings.from_env(env)
    services = services_from_env(env, settings, engines)
    max_bytes = settings.max_request_bytes

    app = http.create_app(
        "agentfn.model",
        openapi=openapi(),
        database=services.store,
        readiness={"registry": services.registry.ready},
        identity=identity,
        max_request_bytes=max_bytes,
    )
    app.extensions["agentfn.model"] = services
    app.extensions[admin.GROUPS] = frozenset(settings.admin_groups)

    app.register_blueprint(bp)
    app.register_blueprint(admin.bp)
    resource = settings.mcp_resource
    app.register_blueprint(protected_resource(resource, [identity.caller.trust.issuer]))
    mcp = LazyMCP(
        lambda: build(
            services,
            identity.verifier_for(resource),
            resource,
            list(settings.mcp_allowed_hosts),
            list(settings.mcp_allowed_origins),
            max_bytes,
        )
    )
    app.extensions["agentfn.model.mcp"] = mcp
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/mcp": mcp})
    if settings.warm_up:
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
