"""The work of the page fetcher: parse, serve from the caller's cache or count and fetch, read, window."""

from __future__ import annotations

import datetime as dt
import logging
import time

from agentfn.shared import clock, telemetry
from agentfn.shared.pseudonym import subject_hash

from . import guard
from .cache import PageCache
from .fetch import Fetcher, Trace
from .reading import Reading, read, window
from .refusals import Refusal
from .store import Store

log = logging.getLogger("agentfn.page")


class Pages:
    def __init__(self, store: Store, fetcher: Fetcher, cache: PageCache, *, daily_pages: int):
        self.store, self.fetcher, self.cache, self.daily_pages = store, fetcher, cache, daily_pages

    def open(
        self,
        subject: str,
        url: str,
        offset: int,
        size: int,
        request_id: str | None = None,
        step: tuple[str, int] | None = None,
    ) -> dict:
        """A window of the page's text. Paging through a page opened lately neither fetches nor counts."""
        target = guard.parse_url(url, self.fetcher.ports)
        reading = self.cache.get(subject, target.url)
        telemetry.annotate({"agentfn.page.cached": reading is not None})
        if reading is None:
            with telemetry.span("fetch_page", {}):
                reading = self._fetch(subject, target, request_id, step)
        total = len(reading.text)
        if offset > total:
            raise Refusal(
                "bad-offset",
                f"offset {offset} is past the end of the page's text ({total} characters); start again from 0",
                total_chars=total,
            )
        text, next_offset, links = window(reading, offset, size)
        return {
            "url": target.url,
            "final_url": reading.final_url,
            "title": reading.title,
            "text": text,
            "offset": offset,
            "next_offset": next_offset,
            "total_chars": total,
            "links": [{"n": link.n, "href": link.href, "text": link.text} for link in links],
        }

    def _fetch(self, subject: str, target: guard.Target, request_id: str | None, step: tuple[str, int] | None) -> Reading:
        if not self.store.reserve(subject, self.daily_pages):
            telemetry.record("agentfn.pages", 1, {"agentfn.outcome": "budget-spent"})
            raise budget_spent(self.daily_pages)
        trace, outcome, started = Trace(host=target.host), "ok", time.perf_counter()
        ms = 0
        try:
            fetched = self.fetcher.get(target, trace)
            ms = round((time.perf_counter() - started) * 1000)
            try:
                reading = read(fetched)
            except Exception:  # the page is untrusted input: a parser that chokes on it is the page's fault
                raise Refusal("upstream-error", "the page could not be read as HTML or text") from None
        except Refusal as refusal:
            outcome = refusal.kind
            raise
        except Exception:
            outcome = "error"
            raise
        finally:
            ms = ms or round((time.perf_counter() - started) * 1000)
            self.store.audit(subject, trace, outcome, ms, step)
            # The host and the path stay in the audit: a trace has only the outcome and the size.
            telemetry.annotate({"agentfn.outcome": outcome, "agentfn.page.bytes": trace.bytes})
            telemetry.record("agentfn.pages", 1, {"agentfn.outcome": outcome})
            log.info(
                "page fetch %s",
                outcome,
                extra={
                    "event": "page_fetch",
                    "request_id": request_id,
                    "subject_hash": subject_hash(subject),
                    "status": trace.status,
                    "count": trace.bytes,
                    "ms": ms,
                },
            )
        self.cache.put(subject, [target.url, reading.final_url], reading)
        return reading


def budget_spent(limit: int, now: dt.datetime | None = None) -> Refusal:
    now = now or dt.datetime.now(dt.UTC)
    reset = clock.next_midnight(now)
    return Refusal(
        "budget-spent",
        f"the caller's {limit} pages for today are spent; more can be opened from "
        f"{clock.timestamp(reset)}. Pages opened in the last few minutes can still be paged through.",
        limit=limit,
        reset_at=clock.timestamp(reset),
        retry_after=clock.seconds_until(reset, now),
    )
