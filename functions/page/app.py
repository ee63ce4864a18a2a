"""The page fetcher's app factory: `gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.page.app:create_app()'`.

Configuration: `PageSettings` (agentfn.page.settings; docs/configuration.md), and identity's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping

from agentfn.shared import app as http
from agentfn.shared.identity import Identity
from flask import Flask

from .cache import PageCache
from .fetch import Fetcher
from .guard import Resolver, parse_servers
from .pages import Pages
from .reading import extractor
from .refusals import Refusal
from .routes import bp, open_schema
from .schemas import openapi
from .settings import PageSettings
from .store import Store


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    settings = PageSettings.from_env(env)
    store = Store(settings.database_url, pool_size=settings.db_pool_size)
    fetcher = Fetcher(
        Resolver(parse_servers(settings.dns_servers)),
        ports=frozenset(settings.ports),
        ca_file=settings.ca_file,
        deadline=settings.deadline_seconds,
        max_bytes=settings.max_bytes,
    )
    cache = PageCache(ttl=settings.cache_seconds, max_pages=settings.cache_pages, max_chars=settings.cache_chars)

    app = http.create_app(
        "agentfn.page",
        openapi=openapi(),
        # In an outage no budget is taken and nothing is fetched; audit rows queued meanwhile wait for the database.
        database=store,
        readiness={},
        identity=Identity.from_env(env, gateway=False, audience="agentfn:page"),
        max_request_bytes=settings.max_request_bytes,
    )
    app.config["AGENTFN_PAGE_WINDOW"] = settings.window
    app.config["AGENTFN_ADMIN_GROUPS"] = frozenset(settings.admin_groups)
    app.extensions["agentfn.page"] = Pages(store, fetcher, cache, daily_pages=settings.daily_pages)

    @app.errorhandler(Refusal)
    def refused(refusal: Refusal):
        response = http.problem_response(refusal.problem())
        if "retry_after" in refusal.extra:
            response.headers["Retry-After"] = str(refusal.extra["retry_after"])
        return response

    app.register_blueprint(bp)
    warm_up(store.became_ready, [open_schema, fetcher.warm_up, extractor])
    return app


WARM_UP_AFTER = 10.0  # seconds: with no readiness probe (a dev run), the warm-up starts anyway


def warm_up(ready: threading.Event, steps: list[Callable[[], object]], after: float = WARM_UP_AFTER) -> threading.Thread:
    """Load what a first page needs and ready does not (trafilatura above all, the body schema, urllib3, DNS) on a
    thread, once the app is first ready: begun before, it would hold the GIL against the worker's own start. A
    page opened meanwhile loads what it needs itself (waiting on the same imports)."""

    def run() -> None:
        ready.wait(after)
        for step in steps:
            step()

    thread = threading.Thread(target=run, name="warm-up", daemon=True)
    thread.start()
    return thread
