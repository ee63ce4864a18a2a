"""The page fetcher's storage: the daily page budget and the fetch audit, in its own schema and role.

The budget is taken on the way to a fetch (one statement). The audit is written off the response path:
rows queue up and one thread writes whatever has queued as one batch. Reading the audit waits for this
process's queue first, and so does the process's exit (gunicorn's graceful stop, SIGTERM or SIGQUIT): the row
of every fetch answered is written, unless the process is killed outright.
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import threading
import time

import psycopg
from psycopg.rows import dict_row

from agentfn.shared import db

from .fetch import Trace

SCHEMA = "page"

# One statement, so concurrent calls cannot both take the last page: the row lock serialises them, and
# the WHERE makes the update (and so the RETURNING row) vanish once the day's pages are spent.
RESERVE = """
INSERT INTO budget AS b (subject, day, pages)
VALUES (%(subject)s, (now() AT TIME ZONE 'UTC')::date, 1)
ON CONFLICT (subject, day) DO UPDATE SET pages = b.pages + 1 WHERE b.pages < %(limit)s
RETURNING pages
"""

# `at` is when the fetch ended, not when its row was written.
AUDIT = """
INSERT INTO audit (at, subject, host, final_host, status, bytes, ms, redirects, outcome, generation_id, step)
VALUES (%(at)s, %(subject)s, %(host)s, %(final_host)s, %(status)s, %(bytes)s, %(ms)s, %(redirects)s, %(outcome)s,
        %(generation_id)s, %(step)s)
"""
MAX_BATCH = 500
# A batch waits this long for more rows: one write for many fetches under load, and never on the heels of the
# response it follows (the writer would take the GIL from it). Reading the audit, or the exit, writes at once.
BATCH_WAIT = 0.25
EXIT_WAIT = 7.0  # seconds the exit waits for the queue: within gunicorn's graceful timeout (10 s)

log = logging.getLogger("agentfn.page")

# For an admin, by generation: every caller's fetches, never a path (the audit keeps none).
FETCHES = """
SELECT generation_id, step, at, host, final_host, status, bytes, ms, redirects, outcome FROM audit
WHERE generation_id = ANY(%(ids)s) ORDER BY generation_id, step, at, id
"""


def _configure(conn) -> None:
    # Each statement here is a transaction of its own (no COMMIT round trip), and it does not wait for its
    # WAL flush: a Postgres crash may forget the last moments of counts and audit rows (never half of a
    # statement), which is worth a disk flush off every page request.
    conn.autocommit = True
    conn.execute("SET synchronous_commit = off")


class Store(db.SchemaStore):
    schema, package = SCHEMA, "agentfn.page"

    def __init__(self, dsn: str, *, pool_size: int = 4):
        super().__init__(dsn, pool_size=pool_size, configure=_configure)
        self._rows: list[dict] = []
        self._queued = self._written = 0  # rows ever queued, rows ever written: `flush` waits for the first
        self._hurry = 0  # flushes waiting: the writer does not wait for more rows
        self._changed = threading.Condition()
        self._writer: threading.Thread | None = None
        self.probed = threading.Event()  # a readiness probe has passed
        atexit.register(self.flush, EXIT_WAIT)

    def ready(self) -> bool:
        """The readiness probe's check (migrations applied, the database answers)."""
        ready = super().ready()
        self.probed.set()
        return ready

    def reserve(self, subject: str, limit: int) -> bool:
        """Take one of the subject's pages for today; False when they are spent."""
        self.migrate()
        with self.pool.connection() as conn:
            return conn.execute(RESERVE, dict(subject=subject, limit=limit)).fetchone() is not None

    def audit(self, subject: str, trace: Trace, outcome: str, ms: int, step: tuple[str, int] | None = None) -> None:
        """Queue one fetch's row; `step`: the model function's generation and step it was, when the request named them."""
        row = dict(
            at=dt.datetime.now(dt.UTC),
            subject=subject,
            host=trace.host,
            final_host=trace.final_host,
            status=trace.status,
            bytes=trace.bytes,
            ms=ms,
            redirects=trace.redirects,
            outcome=outcome,
            generation_id=step[0] if step else None,
            step=step[1] if step else None,
        )
        with self._changed:
            self._rows.append(row)
            self._queued += 1
            if not self._writing() or len(self._rows) in (1, MAX_BATCH):  # it waits for these, nothing else
                self._changed.notify_all()

    def _writing(self) -> bool:
        """Whether the writer thread runs; started if not (the app is made in the worker, after the fork)."""
        if self._writer is not None and self._writer.is_alive():
            return True
        self._writer = threading.Thread(target=self._write, name="page-audit", daemon=True)
        self._writer.start()
        return False

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every row queued so far is written; False when the database did not take them in time."""
        end = time.monotonic() + timeout
        with self._changed:
            target = self._queued
            if target > self._written:
                self._writing()
            self._hurry += 1
            self._changed.notify_all()
            try:
                while self._written < target:
                    left = end - time.monotonic()
                    if left <= 0:
                        count = target - self._written
                        log.error("fetch audit rows not written", extra={"event": "page_audit", "count": count})
                        return False
                    self._changed.wait(left)
            finally:
                self._hurry -= 1
        return True

    def _write(self) -> None:
        """The writer: each batch in one transaction; in an outage the rows wait and are tried again."""
        pause = 0.1
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._rows)
                self._changed.wait_for(lambda: self._hurry or len(self._rows) >= MAX_BATCH, BATCH_WAIT)
                batch = self._rows[:MAX_BATCH]
            try:
                self._insert(batch)
            except self.outages:
                log.warning("fetch audit write failed; retrying", extra={"event": "page_audit", "count": len(batch)})
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            except psycopg.Error:  # a row the table refuses: the others are written one by one, it is dropped
                try:
                    dropped = sum(not self._insert_one(row) for row in batch)
                except self.outages:
                    time.sleep(pause)
                    continue
                log.error("fetch audit rows refused", extra={"event": "page_audit", "count": dropped})
            pause = 0.1
            with self._changed:
                del self._rows[: len(batch)]
                self._written += len(batch)
                self._changed.notify_all()

    def _insert(self, rows: list[dict]) -> None:
        self.migrate()
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(AUDIT, rows)

    def _insert_one(self, row: dict) -> bool:
        try:
            self._insert([row])
        except self.outages:
            raise
        except psycopg.Error:
            return False
        return True

    def fetches(self, generation_ids: list[str]) -> list[dict]:
        self.flush()  # this process's fetches are in the answer, even the last moment's
        self.migrate()
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(FETCHES, dict(ids=generation_ids)).fetchall()
