"""The page fetcher's app factory: `gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.page.app:create_app()'`.

Configuration: `PageSettings` (agentfn.page.settings; docs/configuration.md), and identity's.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Mapping

from flask import Flask

from agentfn.shared import app as http
from agentfn.shared.contract import audience
from agentfn.shared.identity import Identity

from .cache import PageCache
from .fetch import Fetcher
from .guard import Resolver, parse_servers
from .pages import Pages
from .reading import extractor
from .refusals import Refusal
from .routes import OPEN, bp
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
        identity=Identity.from_env(env, gateway=False, audience=audience("page")),
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
    # Last, gc.freeze: what the imports made lives as long as the process; frozen, a full collection (frequent while a
    # large page is read) no longer walks it.
    warm_up(store, [OPEN.get, fetcher.warm_up, extractor, gc.freeze])
    return app


DATABASE_WAIT = 10.0  # seconds: a database not answering by then no longer holds the warm-up back
PROBE_WAIT = 1.0  # seconds the warm-up leaves a readiness probe to come and pass first


def warm_up(store: Store, steps: list[Callable[[], object]]) -> threading.Thread:
    """Load what a first page needs and ready does not (trafilatura above all, the body schema, urllib3, DNS) on a
    thread, once the store is ready: its migrations applied here, then a probe's pass awaited for a moment. Begun
    earlier, the imports would hold the GIL against the worker's start and its first probe; begun only at a probe,
    they would start late under a slow probe period. A page opened meanwhile loads what it needs itself."""

    def run() -> None:
        give_up = time.monotonic() + DATABASE_WAIT
        while time.monotonic() < give_up:
            try:
                store.migrate()
                break
            except Exception:  # the database is not answering yet: the probe reports it, the warm-up waits
                time.sleep(0.2)
        store.probed.wait(PROBE_WAIT)
        for step in steps:
            step()

    thread = threading.Thread(target=run, name="warm-up", daemon=True)
    thread.start()
    return thread
