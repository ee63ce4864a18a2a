"""The page fetcher's storage: the daily page budget and the fetch audit, in its own schema and role."""

from __future__ import annotations

from agentfn.shared import db
from psycopg.rows import dict_row

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

AUDIT = """
INSERT INTO audit (subject, host, final_host, status, bytes, ms, redirects, outcome, generation_id, step)
VALUES (%(subject)s, %(host)s, %(final_host)s, %(status)s, %(bytes)s, %(ms)s, %(redirects)s, %(outcome)s,
        %(generation_id)s, %(step)s)
"""

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

    def reserve(self, subject: str, limit: int) -> bool:
        """Take one of the subject's pages for today; False when they are spent."""
        self.migrate()
        with self.pool.connection() as conn:
            return conn.execute(RESERVE, dict(subject=subject, limit=limit)).fetchone() is not None

    def audit(self, subject: str, trace: Trace, outcome: str, ms: int, step: tuple[str, int] | None = None) -> None:
        """One fetch; `step`: the model function's generation and step it was, when the request named them."""
        self.migrate()
        with self.pool.connection() as conn:
            conn.execute(
                AUDIT,
                dict(
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
                ),
            )

    def fetches(self, generation_ids: list[str]) -> list[dict]:
        self.migrate()
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(FETCHES, dict(ids=generation_ids)).fetchall()
