"""run_code's storage: the daily runs per caller, in its own schema `run_code` and role."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from agentfn.shared import clock, db

SCHEMA = "run_code"

# Take one run if any is left today: the row lock of the upsert serialises concurrent takers, and the
# WHERE keeps the count at the limit (no row returned: spent).
TAKE = """
INSERT INTO daily_runs AS d (subject, day, runs)
VALUES (%(subject)s, (now() AT TIME ZONE 'UTC')::date, 1)
ON CONFLICT (subject, day) DO UPDATE SET runs = d.runs + 1 WHERE d.runs < %(limit)s
RETURNING runs
"""
# A run the sandbox could not start is given back (it was never the caller's).
GIVE_BACK = """
UPDATE daily_runs SET runs = runs - 1
WHERE subject = %(subject)s AND day = (now() AT TIME ZONE 'UTC')::date AND runs > 0
"""
# Yesterday's counts are of no use to anyone; keep a week for the operator's eyes.
PRUNE = "DELETE FROM daily_runs WHERE day < (now() AT TIME ZONE 'UTC')::date - 7"


@dataclass(frozen=True)
class Taken:
    ok: bool
    runs_left: int
    resets_at: dt.datetime


class Store(db.SchemaStore):
    schema, package = SCHEMA, "agentfn.run_code"

    def __init__(self, dsn: str, *, pool_size: int = 2):
        super().__init__(dsn, pool_size=pool_size)

    def after_migrate(self, conn) -> None:
        conn.execute(PRUNE)

    def take(self, subject: str, limit: int) -> Taken:
        """Take one of today's runs for the subject, atomically."""
        self.migrate()
        with self.pool.connection() as conn:
            row = conn.execute(TAKE, {"subject": subject, "limit": limit}).fetchone()
        return Taken(ok=row is not None, runs_left=limit - row[0] if row else 0, resets_at=clock.next_midnight())

    def give_back(self, subject: str) -> None:
        with self.pool.connection() as conn:
            conn.execute(GIVE_BACK, {"subject": subject})
