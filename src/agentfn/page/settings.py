"""The page fetcher's settings (docs/configuration.md is written from them: `python -m agentfn.shared.settings`).
Redirects are capped at 5 and the User-Agent is fixed; neither is a setting."""

from __future__ import annotations

from dataclasses import dataclass

from agentfn.shared.settings import REQUIRED, Settings, setting

from .schemas import MAX_WINDOW, MIN_WINDOW


def ports(text: str) -> tuple[int, ...]:
    found = tuple(int(p) for p in text.split(",") if p.strip())
    if not found:
        raise ValueError(text)
    return found


@dataclass(frozen=True)
class PageSettings(Settings):
    database_url: str = setting("AGENTFN_DATABASE_URL", REQUIRED, "DSN of the page fetcher's own role; its schema is `page`")
    dns_servers: str = setting(
        "AGENTFN_DNS_SERVERS",
        "",
        "DNS servers, comma-separated (`10.0.0.10`, `[fd00::a]:53`)",
        shown="the system's resolv.conf",
    )
    ports: tuple[int, ...] = setting(
        "AGENTFN_PAGE_PORTS",
        (80, 443),
        "the only ports a URL (or a redirect) may name",
        minimum=1,
        maximum=65535,
        parse=ports,
    )
    ca_file: str | None = setting(
        "AGENTFN_PAGE_CA_FILE", None, "CA certificates that https pages are verified against", shown="certifi's bundle"
    )
    deadline_seconds: float = setting(
        "AGENTFN_PAGE_DEADLINE_SECONDS",
        10.0,
        "one deadline over the whole fetch: DNS, connect, TLS, redirects, body",
        minimum=0.1,
    )
    max_bytes: int = setting(
        "AGENTFN_PAGE_MAX_BYTES", 5 * 1024 * 1024, "cap on a page's decompressed size, counted while streaming", minimum=1024
    )
    daily_pages: int = setting(
        "AGENTFN_PAGE_DAILY_PAGES", 200, "pages a caller may fetch per UTC day (paging a cached page is free)", minimum=1
    )
    window: int = setting(
        "AGENTFN_PAGE_WINDOW",
        6000,
        "characters of text a call returns when it names no `window`",
        minimum=MIN_WINDOW,
        maximum=MAX_WINDOW,
    )
    cache_seconds: int = setting(
        "AGENTFN_PAGE_CACHE_SECONDS", 300, "how long a caller's opened page is kept for paging (0: no cache)", minimum=0
    )
    cache_pages: int = setting("AGENTFN_PAGE_CACHE_PAGES", 256, "pages kept per process, all callers together", minimum=0)
    cache_chars: int = setting(
        "AGENTFN_PAGE_CACHE_CHARS", 50_000_000, "characters of text kept per process, all callers together", minimum=0
    )
    max_request_bytes: int = setting("AGENTFN_MAX_REQUEST_BYTES", 16 * 1024, "larger request bodies get 413", minimum=1024)
    db_pool_size: int = setting("AGENTFN_DB_POOL_SIZE", 4, "connections per process", minimum=1)
    admin_groups: tuple[str, ...] = setting(
        "AGENTFN_ADMIN_GROUPS",
        ("platform-admins",),
        "comma-separated groups whose callers may read the fetch audit (`GET /v1/audit?generation_id=...`, no route: "
        "the model function's calls door asks it as the admin); empty: no one",
        keep_empty=True,
    )
