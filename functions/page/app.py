"""The page fetcher's app factory: `gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.page.app:create_app()'`.

Configuration (environment), besides identity's (`agentfn.shared.identity`):

| name | default | meaning |
|---|---|---|
| `AGENTFN_DATABASE_URL` | (required) | DSN of the page fetcher's own role; its schema is `page` |
| `AGENTFN_DNS_SERVERS` | the system's resolv.conf | DNS servers, comma-separated (`10.0.0.10`, `[fd00::a]:53`) |
| `AGENTFN_PAGE_PORTS` | `80,443` | the only ports a URL (or a redirect) may name |
| `AGENTFN_PAGE_CA_FILE` | certifi's bundle | CA certificates that https pages are verified against |
| `AGENTFN_PAGE_DEADLINE_SECONDS` | `10` | one deadline over the whole fetch: DNS, connect, TLS, redirects, body |
| `AGENTFN_PAGE_MAX_BYTES` | `5242880` | cap on a page's decompressed size, counted while streaming |
| `AGENTFN_PAGE_DAILY_PAGES` | `200` | pages a caller may fetch per UTC day (paging a cached page is free) |
| `AGENTFN_PAGE_WINDOW` | `6000` | characters of text a call returns when it names no `window` |
| `AGENTFN_PAGE_CACHE_SECONDS` | `300` | how long a caller's opened page is kept for paging (0: no cache) |
| `AGENTFN_PAGE_CACHE_PAGES` | `256` | pages kept per process, all callers together |
| `AGENTFN_PAGE_CACHE_CHARS` | `50000000` | characters of text kept per process, all callers together |
| `AGENTFN_MAX_REQUEST_BYTES` | `16384` | larger request bodies get 413 |
| `AGENTFN_DB_POOL_SIZE` | `4` | connections per process |
| `AGENTFN_ADMIN_GROUPS` | `platform-admins` | comma-separated groups whose callers may read the fetch audit (`GET /v1/audit`, asked by the model function's admin door) |

Redirects are capped at 5 and the User-Agent is fixed; neither is configurable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agentfn.shared import app as http
from agentfn.shared.identity import Identity
from flask import Flask

from .cache import PageCache
from .fetch import Fetcher
from .guard import Resolver, parse_servers
from .pages import Pages
from .refusals import Refusal
from .routes import bp
from .schemas import MAX_WINDOW, MIN_WINDOW, openapi
from .store import Store


def _int(env: Mapping[str, str], name: str, default: int, low: int = 0) -> int:
    value = int(env.get(name, str(default)))
    if value < low:
        raise RuntimeError(f"{name} must be >= {low}")
    return value


def _ports(text: str) -> frozenset[int]:
    ports = frozenset(int(p) for p in text.split(",") if p.strip())
    if not ports or not all(0 < p < 65536 for p in ports):
        raise RuntimeError("AGENTFN_PAGE_PORTS must list ports from 1 to 65535")
    return ports


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    store = Store(env["AGENTFN_DATABASE_URL"], pool_size=_int(env, "AGENTFN_DB_POOL_SIZE", 4, 1))
    fetcher = Fetcher(
        Resolver(parse_servers(env.get("AGENTFN_DNS_SERVERS", ""))),
        ports=_ports(env.get("AGENTFN_PAGE_PORTS", "80,443")),
        ca_file=env.get("AGENTFN_PAGE_CA_FILE") or None,
        deadline=float(env.get("AGENTFN_PAGE_DEADLINE_SECONDS", "10")),
        max_bytes=_int(env, "AGENTFN_PAGE_MAX_BYTES", 5 * 1024 * 1024, 1024),
    )
    cache = PageCache(
        ttl=_int(env, "AGENTFN_PAGE_CACHE_SECONDS", 300),
        max_pages=_int(env, "AGENTFN_PAGE_CACHE_PAGES", 256),
        max_chars=_int(env, "AGENTFN_PAGE_CACHE_CHARS", 50_000_000),
    )
    window = _int(env, "AGENTFN_PAGE_WINDOW", 6000, MIN_WINDOW)
    if window > MAX_WINDOW:
        raise RuntimeError(f"AGENTFN_PAGE_WINDOW must be <= {MAX_WINDOW}")

    app = http.create_app(
        "agentfn.page",
        openapi=openapi(),
        # In an outage the budget was taken before any fetch; a fetch whose audit then failed stays counted.
        database=store,
        readiness={},
        identity=Identity.from_env(env, gateway=False, audience="agentfn:page"),
        max_request_bytes=_int(env, "AGENTFN_MAX_REQUEST_BYTES", 16 * 1024, 1024),
    )
    app.config["AGENTFN_PAGE_WINDOW"] = window
    app.config["AGENTFN_ADMIN_GROUPS"] = frozenset(
        g.strip() for g in env.get("AGENTFN_ADMIN_GROUPS", "platform-admins").split(",") if g.strip()
    )
    app.extensions["agentfn.page"] = Pages(store, fetcher, cache, daily_pages=_int(env, "AGENTFN_PAGE_DAILY_PAGES", 200, 1))

    @app.errorhandler(Refusal)
    def refused(refusal: Refusal):
        response = http.problem_response(refusal.problem())
        if "retry_after" in refusal.extra:
            response.headers["Retry-After"] = str(refusal.extra["retry_after"])
        return response

    app.register_blueprint(bp)
    return app
