"""The model function's storage: the generation record (L4), the daily token budget and grant counters.

Every statement names the subject. A round's tokens are reserved before the engine is called and settled
after, under a lock on the caller's budget row for the day, so concurrent turns (in any process) see each
other's holds and the day's limit is never passed by more than one round's estimate going wrong.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from agentfn.shared import db

SCHEMA = "model"

OPEN = """
INSERT INTO generations (id, kind, channel, subject, agent, tier, status, day, hold_until, conversation)
VALUES (%(id)s, %(kind)s, %(channel)s, %(subject)s, %(agent)s, %(tier)s, 'running', %(day)s,
        now() + make_interval(secs => %(hold)s), %(conversation)s)
"""

# What the turns of one conversation did since it last ended (the steps of each, in order): a session's own record.
SESSION_STEPS = """
SELECT step_log FROM generations
WHERE subject = %(subject)s AND agent = %(agent)s AND conversation = %(conversation)s AND kind = 'turn'
  AND started_at > coalesce((SELECT max(started_at) FROM generations
                             WHERE subject = %(subject)s AND agent = %(agent)s AND conversation = %(conversation)s
                               AND kind = 'session_end' AND status = 'ok'), '-infinity')
ORDER BY started_at
"""

ENSURE_BUDGET = """
INSERT INTO token_budgets (subject, day) VALUES (%(subject)s, %(day)s) ON CONFLICT (subject, day) DO NOTHING
"""

LOCK_BUDGET = "SELECT spent FROM token_budgets WHERE subject = %(subject)s AND day = %(day)s FOR UPDATE"

# Holds of the caller's other generations still under way; a dead process's hold lapses at hold_until.
HELD = """
SELECT coalesce(sum(reserved), 0) FROM generations
WHERE subject = %(subject)s AND day = %(day)s AND reserved > 0 AND hold_until > now() AND id <> %(id)s
"""

SPEND = "UPDATE token_budgets SET spent = spent + %(used)s WHERE subject = %(subject)s AND day = %(day)s"

SETTLE = """
UPDATE generations SET reserved = 0, tokens_in = tokens_in + %(tokens_in)s, tokens_out = tokens_out + %(tokens_out)s,
       rounds = rounds + %(rounds)s
WHERE id = %(id)s AND subject = %(subject)s
"""

HOLD = "UPDATE generations SET reserved = %(amount)s WHERE id = %(id)s AND subject = %(subject)s"

FINISH = """
UPDATE generations SET status = %(status)s, problem = %(problem)s, steps = %(steps)s, step_log = %(step_log)s,
       reserved = 0, duration_ms = %(duration_ms)s
WHERE id = %(id)s AND subject = %(subject)s
"""

SPENT = "SELECT coalesce((SELECT spent FROM token_budgets WHERE subject = %(subject)s AND day = %(day)s), 0)"

COUNT_CALL = """
INSERT INTO grant_calls AS g (subject, grant_ref, day, calls) VALUES (%(subject)s, %(grant)s, %(day)s, 1)
ON CONFLICT (subject, grant_ref, day) DO UPDATE SET calls = g.calls + 1 WHERE g.calls < %(limit)s
RETURNING calls
"""

USE_APPROVAL = """
INSERT INTO approvals_used (jti, subject, expires_at) VALUES (%(jti)s, %(subject)s, to_timestamp(%(exp)s))
ON CONFLICT (jti) DO NOTHING RETURNING jti
"""

PRUNE_APPROVALS = "DELETE FROM approvals_used WHERE expires_at < now() - interval '1 minute'"


# Every caller's generations, newest first, started before a time (the admin door pages back with it).
RECENT = """
SELECT id, kind, channel, subject, agent, tier, status, problem, tokens_in, tokens_out, rounds, steps, step_log,
       started_at, duration_ms
FROM generations
WHERE started_at < coalesce(%(before)s::timestamptz, 'infinity')
ORDER BY started_at DESC, id DESC
LIMIT %(limit)s
"""

# The tool calls of every caller, newest first: one row per step of a turn and per call alone or over MCP, from
# the record's step log (names, statuses, timings and grants; the record never had arguments or results).
CALLS = """
SELECT g.id, g.started_at, g.subject, g.agent, g.channel, s.n, s.step->>'tool' AS tool, s.step->>'status' AS outcome,
       s.step->'ms' AS ms, s.step->>'grant' AS grant_ref
FROM generations g CROSS JOIN LATERAL jsonb_array_elements(g.step_log) WITH ORDINALITY AS s(step, n)
WHERE g.kind IN ('turn', 'tool_call')
  AND g.started_at >= coalesce(%(since)s::timestamptz, '-infinity')
  AND (g.started_at, g.id, s.n) < (coalesce(%(at)s::timestamptz, 'infinity'), coalesce(%(id)s::uuid,
       'ffffffff-ffff-ffff-ffff-ffffffffffff'), coalesce(%(n)s::bigint, 9223372036854775807))
  AND (%(agent)s::text IS NULL OR g.agent = %(agent)s) AND (%(channel)s::text IS NULL OR g.channel = %(channel)s)
  AND (%(tool)s::text IS NULL OR s.step->>'tool' = %(tool)s)
  AND (%(outcome)s::text IS NULL OR s.step->>'status' = %(outcome)s)
ORDER BY g.started_at DESC, g.id DESC, s.n DESC
LIMIT %(limit)s
"""


def today() -> datetime.date:
    return datetime.datetime.now(datetime.UTC).date()


@dataclass
class Spent:
    """Tokens and rounds spent and not yet settled into the caller's budget and the record."""

    tokens_in: int = 0
    tokens_out: int = 0
    rounds: int = 0


class _Used(Exception):
    """Rolls back a request's approvals when one of them was used before."""


class Store(db.SchemaStore):
    schema, package = SCHEMA, "agentfn.model"

    def open(
        self,
        *,
        kind: str,
        channel: str,
        subject: str,
        agent: str | None,
        tier: str | None,
        hold_seconds: float,
        day: datetime.date,
        conversation: str | None = None,
    ) -> uuid.UUID:
        """A generation row, running; its id is the generation_id the caller is given."""
        gen = uuid.uuid4()
        with self.pool.connection() as conn:
            conn.execute(
                OPEN,
                {
                    "id": gen,
                    "kind": kind,
                    "channel": channel,
                    "subject": subject,
                    "agent": agent,
                    "tier": tier,
                    "day": day,
                    "hold": hold_seconds,
                    "conversation": conversation,
                },
            )
        return gen

    def session_steps(self, subject: str, agent: str, conversation: str) -> list[dict]:
        """The steps the conversation's turns took since it last ended (tool, status), in order."""
        args = {"subject": subject, "agent": agent, "conversation": conversation}
        with self.pool.connection() as conn:
            return [step for (log,) in conn.execute(SESSION_STEPS, args).fetchall() for step in log]

    def round(
        self,
        gen: uuid.UUID,
        subject: str,
        day: datetime.date,
        *,
        limit: int,
        settle: Spent | None = None,
        want: int = 0,
        least: int = 0,
    ) -> int:
        """Settle the last round's tokens (if any), then hold up to `want` tokens for the next (if asked).

        Returns the tokens held: `want`, or less when the day's budget has less left, or 0 when fewer than
        `least` are left (the round may not run). One transaction, under the budget row's lock.
        """
        args = {"id": gen, "subject": subject, "day": day}
        with self.pool.connection() as conn, conn.transaction():
            conn.execute(ENSURE_BUDGET, args)
            spent = conn.execute(LOCK_BUDGET, args).fetchone()[0]
            if settle is not None:
                used = settle.tokens_in + settle.tokens_out
                conn.execute(SPEND, {**args, "used": used})
                conn.execute(
                    SETTLE, {**args, "tokens_in": settle.tokens_in, "tokens_out": settle.tokens_out, "rounds": settle.rounds}
                )
                spent += used
            if want <= 0:
                return 0
            held = conn.execute(HELD, args).fetchone()[0]
            granted = min(want, limit - spent - held)
            if granted < max(least, 1):
                return 0
            conn.execute(HOLD, {**args, "amount": granted})
            return granted

    def finish(
        self,
        gen: uuid.UUID,
        subject: str,
        day: datetime.date,
        *,
        status: str,
        problem: int | None,
        step_log: list[dict],
        duration_ms: int,
        settle: Spent | None = None,
    ) -> None:
        args = {"id": gen, "subject": subject, "day": day}
        with self.pool.connection() as conn, conn.transaction():
            if settle is not None and (settle.tokens_in or settle.tokens_out or settle.rounds):
                conn.execute(ENSURE_BUDGET, args)
                conn.execute(LOCK_BUDGET, args)
                conn.execute(SPEND, {**args, "used": settle.tokens_in + settle.tokens_out})
                conn.execute(
                    SETTLE, {**args, "tokens_in": settle.tokens_in, "tokens_out": settle.tokens_out, "rounds": settle.rounds}
                )
            conn.execute(
                FINISH,
                {
                    **args,
                    "status": status,
                    "problem": problem,
                    "steps": len(step_log),
                    "step_log": Jsonb(step_log),
                    "duration_ms": duration_ms,
                },
            )

    def recent(self, limit: int, before: datetime.datetime | None) -> list[dict]:
        """The newest generations of every caller started before `before` (None: now), at most `limit`."""
        self.migrate()
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(RECENT, {"limit": limit, "before": before}).fetchall()

    def calls(
        self,
        *,
        limit: int,
        since: datetime.datetime | None,
        after: tuple | None,
        agent: str | None,
        tool: str | None,
        channel: str | None,
        outcome: str | None,
    ) -> list[dict]:
        """Every caller's tool calls, newest first, from `since`, past the row `after` (started_at, id, n) if given."""
        self.migrate()
        at, gen, n = after or (None, None, None)
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(
                CALLS,
                {
                    "limit": limit,
                    "since": since,
                    "at": at,
                    "id": gen,
                    "n": n,
                    "agent": agent,
                    "tool": tool,
                    "channel": channel,
                    "outcome": outcome,
                },
            ).fetchall()

    def spent(self, subject: str, day: datetime.date) -> int:
        with self.pool.connection() as conn:
            return conn.execute(SPENT, {"subject": subject, "day": day}).fetchone()[0]

    def count_call(self, subject: str, grant: str, limit: int, day: datetime.date) -> bool:
        """Count one call through a grant with a daily limit; False (nothing counted) when it is spent."""
        with self.pool.connection() as conn:
            return (
                conn.execute(COUNT_CALL, {"subject": subject, "grant": grant, "day": day, "limit": limit}).fetchone()
                is not None
            )

    def use_approvals(self, subject: str, tokens: list[tuple[str, int]]) -> bool:
        """Use up these (jti, exp) at once: True, or False (nothing used) when one was used before.

        One transaction: the primary key lets one of two concurrent uses of a token win; the loser's
        whole request is refused and none of its other tokens is used up.
        """
        try:
            with self.pool.connection() as conn, conn.transaction():
                conn.execute(PRUNE_APPROVALS)
                for jti, exp in tokens:
                    if conn.execute(USE_APPROVAL, {"jti": jti, "subject": subject, "exp": exp}).fetchone() is None:
                        raise _Used()
        except _Used:
            return False
        return True
