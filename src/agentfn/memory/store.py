"""Memory's storage: SQL over Postgres + pgvector. Every statement filters by subject; RLS is the second wall."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

from agentfn.shared import db

from . import terms
from .held import Held, HeldEntries
from .quotas import Quotas, Survey

SCHEMA = "memory"

log = logging.getLogger("agentfn.memory")

COLUMNS = "id, kind, text, source, session_id, model, created_at, updated_at"

LIST = f"""
SELECT {COLUMNS} FROM entries
WHERE subject = %(subject)s AND (%(kind)s::text IS NULL OR kind = %(kind)s)
ORDER BY created_at DESC, id
LIMIT %(limit)s OFFSET %(offset)s
"""

GET = f"SELECT {COLUMNS} FROM entries WHERE subject = %(subject)s AND id = %(id)s"

INSERT = f"""
INSERT INTO entries (id, subject, kind, text, source, session_id, model, embedding)
VALUES (%(id)s, %(subject)s, %(kind)s, %(text)s, %(source)s, %(session_id)s, %(model)s, %(embedding)s::halfvec)
RETURNING {COLUMNS}
"""

CORRECT = f"""
UPDATE entries
SET text = %(text)s, source = %(source)s, model = %(model)s, embedding = %(embedding)s::halfvec, updated_at = now()
WHERE subject = %(subject)s AND id = %(id)s
RETURNING {COLUMNS}
"""

FORGET = "DELETE FROM entries WHERE subject = %(subject)s AND id = %(id)s"

# Every entry of the subject, in one statement: what was deleted, counted by kind, and when. It waits first for
# the subject's writes under way (each holds the quota row, see LOCK), so none of them outlives the forgetting.
WAIT_FOR_WRITES = "SELECT 1 FROM quotas WHERE subject = %(subject)s FOR UPDATE"
FORGET_ALL = """
WITH gone AS (DELETE FROM entries WHERE subject = %(subject)s RETURNING kind)
SELECT count(*) FILTER (WHERE kind = 'fact') AS fact, count(*) FILTER (WHERE kind = 'preference') AS preference,
       count(*) FILTER (WHERE kind = 'episode') AS episode, now() AS at
FROM gone
"""

# Writes. Each write locks its subject's quota row first (created on the first write, with a full bucket),
# refilling the bucket to now; statements after the lock see every write committed before it. The lock is held while
# the write's embedding runs: one subject's writes take turns, their embeddings still side by side.
AVAILABLE = (
    "least(%(rate)s::float8, q.tokens + %(rate)s / 60.0 * "
    "greatest(0, extract(epoch FROM clock_timestamp() - q.refreshed_at))::float8)"
)
LOCK = f"""
INSERT INTO quotas AS q (subject, tokens, refreshed_at) VALUES (%(subject)s, %(rate)s, clock_timestamp())
ON CONFLICT (subject) DO UPDATE SET tokens = {AVAILABLE}, refreshed_at = clock_timestamp()
RETURNING tokens AS available
"""
# The subject's entries (counting stops at the cap), and the oldest entry that is the same note as the text
# (a lookup in entries_notes; none for a NULL text). `exclude`: the entry being corrected.
SURVEY = f"""
SELECT n.entries, d.*
FROM (SELECT count(*) AS entries FROM (SELECT 1 FROM entries WHERE subject = %(subject)s LIMIT %(cap)s) e) n
LEFT JOIN LATERAL (
    SELECT {COLUMNS} FROM entries
    WHERE subject = %(subject)s AND kind <> 'episode' AND note_digest = md5(note_key(%(text)s::text))
      AND note_key(text) = note_key(%(text)s::text) AND id IS DISTINCT FROM %(exclude)s::uuid
    ORDER BY created_at, id LIMIT 1
) d ON true
"""
PRESURVEY = f"""
SELECT s.*, coalesce((SELECT {AVAILABLE} FROM quotas q WHERE q.subject = %(subject)s), %(rate)s) AS available
FROM ({SURVEY}) s
"""
# A write statement, preceded by taking its cost from the bucket (in the same round trip).
CHARGE = "WITH charge AS (UPDATE quotas SET tokens = tokens - %(cost)s WHERE subject = %(subject)s AND %(cost)s > 0) "

KINDS = "(%(kinds)s::text[] IS NULL OR e.kind = ANY(%(kinds)s))"
# Cosine similarity as the inner product: every vector is a unit vector (the embedders normalize), and pgvector's
# inner product skips the two norms its cosine computes for each entry (0.8-1.1 ms of the statement at 10,000 entries).
# Stored as halfvec, a vector's norm is 1 to within about 1e-4; so are the two similarities.
SIMILARITY = "-(e.embedding <#> q.v)"

# The subject's notes of the configured model above the floor and at least `lift` above the mean similarity of the
# subject's 5 nearest, nearest first, until the first drop in similarity larger than the gap (studies/recall: the
# notes after a clear drop, or level with the question's nearest crowd, are the ones not asked about). Each cut keeps
# a run of the nearest, so a note's rank is its rank among the nearest.
NEAREST = f"""
SELECT id, similarity, rank FROM (
    SELECT id, similarity, rank, count(*) FILTER (WHERE drop > %(gap)s) OVER (ORDER BY rank) AS drops
    FROM (
        SELECT id, similarity, rank, lag(similarity) OVER (ORDER BY rank) - similarity AS drop
        FROM (
            SELECT id, similarity, rank, avg(similarity) FILTER (WHERE rank <= 5) OVER () AS crowd
            FROM (
                SELECT id, similarity, row_number() OVER (ORDER BY similarity DESC) AS rank
                FROM (
                    -- Ranked after the limit: a window over the subject's every entry sorted all of them in full
                    -- (10,000 entries: most of recall's SQL), where the limit alone keeps the nearest as it goes.
                    SELECT e.id, {SIMILARITY} AS similarity
                    FROM entries e, q
                    WHERE e.subject = %(subject)s AND e.model = %(model)s AND {KINDS}
                    ORDER BY similarity DESC
                    LIMIT %(depth)s
                ) nearest
            ) ranked
        ) crowd
        WHERE similarity >= %(threshold)s AND similarity - crowd >= %(lift)s
    ) drops
) cut
WHERE drops = 0
"""

# The subject's newest preferences, whatever their similarity: how a person wants to be answered holds for every
# question, and a preference seldom resembles one ("Always call me Captain." / "What is a closure?").
STANDING = f"""
SELECT {COLUMNS}, 1 - (embedding <=> %(query)s::halfvec) AS similarity, ARRAY['standing'] AS matched
FROM entries
WHERE subject = %(subject)s AND model = %(model)s AND kind = 'preference'
ORDER BY updated_at DESC, id
LIMIT %(n)s
"""

# Similarity alone: nearest first, as NEAREST cuts them.
RECALL_VECTOR = f"""
WITH q AS (SELECT %(query)s::halfvec AS v), by_vector AS ({NEAREST})
SELECT {", ".join("e." + c for c in COLUMNS.split(", "))}, n.similarity, ARRAY['vector'] AS matched
FROM by_vector n JOIN entries e ON e.id = n.id AND e.subject = %(subject)s
ORDER BY n.rank
LIMIT %(limit)s
"""

# Hybrid (studies/recall): the subject's entries ranked twice, by vector (NEAREST) and by full-text terms, fused by
# reciprocal rank (k = 60). Shown: what either list ranks first, the vector list's first `vector_alone`, and whatever
# both lists found (a fused score of at least 1/(k+1)).
# A question's terms: split by the notes' own parser, function words dropped, the ending cut by the language's
# suffix rule (unless fewer than min_stem letters would remain), stems OR'ed as prefixes (terms.parameters).
# Each stem is quoted as one tsquery lexeme, so a word such as "1.30" or "a/b" stays one term.
QUESTION_TERMS = """
SELECT to_tsquery('simple', string_agg(quote_lexeme(left(
    CASE WHEN length(cut) >= %(min_stem)s THEN cut ELSE lexeme END, %(stem)s)) || ':*', ' | '))
FROM (SELECT lexeme, regexp_replace(lexeme, %(suffixes)s, '') AS cut
      FROM unnest(to_tsvector('simple', fold(%(question)s)))
      WHERE lexeme <> ALL(%(stop)s) AND length(lexeme) > 1) words
"""

# The text list alone: it needs no embedding, so Store.recall runs it while the question is being embedded.
BY_TEXT = f"""
SELECT e.id, rank() OVER (ORDER BY ts_rank(e.terms, q.t, 1) DESC) AS rank
FROM entries e, q
WHERE e.subject = %(subject)s AND e.model = %(model)s AND {KINDS} AND e.terms @@ q.t
ORDER BY ts_rank(e.terms, q.t, 1) DESC
LIMIT %(depth)s
"""


def _hybrid(question: str, by_text: str) -> str:
    return f"""
WITH q AS (SELECT {question}),
by_vector AS ({NEAREST}),
by_text AS ({by_text}),
fused AS (
    SELECT id, sum(1.0 / (%(k)s + rank)) AS score, array_agg(list ORDER BY list DESC) AS matched,
           min(rank) FILTER (WHERE list = 'vector') AS vector_rank
    FROM (SELECT id, rank, 'vector' AS list FROM by_vector UNION ALL SELECT id, rank, 'text' FROM by_text) lists
    GROUP BY id
)
SELECT {", ".join("e." + c for c in COLUMNS.split(", "))}, {SIMILARITY} AS similarity, f.matched
FROM fused f JOIN entries e ON e.id = f.id AND e.subject = %(subject)s, q
WHERE f.score >= 1.0 / (%(k)s + 1) OR f.vector_rank <= %(vector_alone)s
ORDER BY f.score DESC, similarity DESC
LIMIT %(limit)s
"""


# Hybrid recall in one statement (the question's embedding at hand), and in two: the text list first (RECALL_TEXT),
# then the vector list fused with the text list's ranks as the first statement found them (RECALL_FUSED).
RECALL_HYBRID = _hybrid(f"%(query)s::halfvec AS v, ({QUESTION_TERMS}) AS t", BY_TEXT)
RECALL_TEXT = f"WITH q AS (SELECT ({QUESTION_TERMS}) AS t) {BY_TEXT}"
RECALL_FUSED = _hybrid(
    "%(query)s::halfvec AS v", "SELECT * FROM unnest(%(text_ids)s::uuid[], %(text_ranks)s::int8[]) AS t(id, rank)"
)
# Recall's two statements see one snapshot, as the one statement does; and each runs its prepared generic plan. Every
# subject gets the same plan (index-only scans by subject and model), and planning it anew for each question's values
# made the statement after the embedding about 0.4 ms slower for a subject of 1,000 entries and 2.7 ms for one of
# 10,000. Left to itself Postgres keeps planning anew, as the custom plans look cheaper.
RECALL_TRANSACTION = (
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
    "SET LOCAL plan_cache_mode = force_generic_plan",
)
SET_SUBJECT = "SELECT set_config('agentfn.subject', %s, true)"
VERSION = "SELECT coalesce((SELECT version FROM versions WHERE subject = %s), 0)"
RRF_K = 60
DEPTH = 100  # ranks past this cannot lift a note over the cut unless both lists hold it near the top

STALE = """
SELECT id, text FROM entries WHERE subject = %(subject)s AND model <> %(model)s ORDER BY id LIMIT %(limit)s
"""
REEMBED = """
UPDATE entries SET model = %(model)s, embedding = %(embedding)s::halfvec
WHERE subject = %(subject)s AND id = %(id)s
"""


# An exchanged token's one use of a kind (see migration 0005): claimed, or nothing when it was claimed before (the
# claim of another transaction under way waits for it). Rows past their expiry are cleared on the way, skipping any
# another claim is clearing.
CLAIM = """
WITH cleared AS (
    DELETE FROM token_uses WHERE ctid IN (
        SELECT ctid FROM token_uses WHERE expires_at < now() LIMIT 100 FOR UPDATE SKIP LOCKED
    )
)
INSERT INTO token_uses (jti, use, expires_at) VALUES (%(jti)s, %(use)s, to_timestamp(%(until)s))
ON CONFLICT DO NOTHING
RETURNING 1
"""


@dataclass(frozen=True)
class Once:
    """One use of an exchanged token: `use` ("write" or "forget") of the token `jti`, remembered `until` (epoch
    seconds) the token could no longer be taken."""

    jti: str
    use: str
    until: float


class Spent(Exception):
    """The exchanged token has had its use of this kind: nothing was written or forgotten."""


def _claim(cur: psycopg.Cursor, once: Once | None) -> None:
    if once is not None and cur.execute(CLAIM, dict(jti=once.jti, use=once.use, until=once.until)).fetchone() is None:
        raise Spent(once.use)


def _survey(row: dict) -> Survey:
    duplicate = {c: row[c] for c in COLUMNS.split(", ")} if row["id"] is not None else None
    return Survey(entries=row["entries"], available=float(row["available"]), duplicate=duplicate)


def _configure(conn: psycopg.Connection) -> None:
    register_vector(conn)
    conn.commit()


class Store(db.SchemaStore):
    schema, package = SCHEMA, "agentfn.memory"

    def __init__(self, dsn: str, *, pool_size: int = 4, held_bytes: int = 0):
        super().__init__(dsn, pool_size=pool_size, configure=_configure)
        # Recall's work that needs no embedding, done while the question is embedded (see recall).
        self._aside = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="agentfn-memory-recall")
        self.held = HeldEntries(held_bytes)  # 0: none held, Postgres ranks every recall
        self._holding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentfn-memory-hold")

    def close(self) -> None:
        self._holding.shutdown()
        self._aside.shutdown()
        super().close()

    @contextmanager
    def subject(self, subject: str) -> Iterator[psycopg.Cursor]:
        """One transaction bound to one subject: the setting the RLS policy reads lives only as long as it."""
        self.migrate()
        with self.pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            cur.execute(SET_SUBJECT, (subject,))
            yield cur

    def list(self, subject: str, kind: str | None, limit: int, offset: int) -> list[dict]:
        with self.subject(subject) as cur:
            return cur.execute(LIST, dict(subject=subject, kind=kind, limit=limit, offset=offset)).fetchall()

    def get(self, subject: str, entry_id: uuid.UUID) -> dict | None:
        with self.subject(subject) as cur:
            return cur.execute(GET, dict(subject=subject, id=entry_id)).fetchone()

    def survey(self, subject: str, text: str | None, quotas: Quotas, exclude: uuid.UUID | None = None) -> Survey:
        """The subject's quota and duplicate, read without the lock: the check before an embedding is spent."""
        params = dict(subject=subject, text=text, exclude=exclude, cap=quotas.max_entries, rate=quotas.writes_per_minute)
        with self.subject(subject) as cur:
            return _survey(cur.execute(PRESURVEY, params).fetchone())

    @contextmanager
    def _locked(
        self,
        subject: str,
        text: str | None,
        quotas: Quotas,
        exclude: uuid.UUID | None,
        check: Callable[[Survey], dict | None],
        once: Once | None = None,
    ) -> Iterator[tuple[psycopg.Cursor, dict | None]]:
        """A write's transaction: the subject's quota row locked, the survey read after it and checked, and the
        exchanged token's use claimed (`once`, raising `Spent`). `check` raises to refuse (nothing is written) or
        returns an entry to answer with instead of writing; the write itself ends the transaction (_commit).
        Whatever raises rolls it back, the claim with it."""
        params = dict(subject=subject, text=text, exclude=exclude, cap=quotas.max_entries, rate=quotas.writes_per_minute)
        self.migrate()
        with self.pool.connection() as conn:
            try:
                with conn.cursor(row_factory=dict_row) as cur:
                    cur.execute(SET_SUBJECT, (subject,))
                    available = cur.execute(LOCK, params).fetchone()["available"]
                    survey = cur.execute(SURVEY, params).fetchone()
                    answer = check(_survey(survey | {"available": available}))
                    _claim(cur, once)
                    yield cur, answer
                conn.commit()  # an answer, nothing written; after a write, already committed
            except BaseException:
                if not conn.closed:  # a broken connection is closed, and the pool discards it
                    conn.rollback()
                raise

    @staticmethod
    def _commit(cur: psycopg.Cursor, statement: str, params: dict) -> dict | None:
        """A write and its transaction's COMMIT in one round trip: all that follows the embedding."""
        with cur.connection.pipeline():
            cur.execute(statement, params)
            cur.connection.commit()
        return cur.fetchone()

    def insert(
        self,
        subject: str,
        kind: str,
        text: str,
        source: str,
        model: str,
        embedding: Callable[[], np.ndarray],
        *,
        quotas: Quotas,
        cost: int,
        check: Callable[[Survey], dict | None],
        session_id: str | None = None,
        once: Once | None = None,
    ) -> tuple[dict, bool]:
        """(the new row, False), or (an entry `check` answered with, True): then nothing is written. `embedding` is
        called once `check` admits the write: a write refused or answered never waits for it. `once`: the
        exchanged token's write, claimed with it (an answer claims it too)."""
        with self._locked(subject, text if kind != "episode" else None, quotas, None, check, once) as (cur, answer):
            if answer is not None:
                return answer, True
            return self._commit(
                cur,
                CHARGE + INSERT,
                dict(
                    id=uuid.uuid4(),
                    subject=subject,
                    kind=kind,
                    text=text,
                    source=source,
                    session_id=session_id,
                    model=model,
                    embedding=embedding(),
                    cost=cost,
                ),
            ), False

    def correct(
        self,
        subject: str,
        entry_id: uuid.UUID,
        text: str,
        source: str,
        model: str,
        embedding: Callable[[], np.ndarray],
        *,
        quotas: Quotas,
        compare: str | None,
        check: Callable[[Survey], dict | None],
    ) -> dict | None:
        """The corrected row (None if it is gone); `compare`: the text looked up as a duplicate, if any. `embedding`
        is called once `check` admits the correction."""
        with self._locked(subject, compare, quotas, entry_id, check) as (cur, _):
            return self._commit(
                cur,
                CHARGE + CORRECT,
                dict(subject=subject, id=entry_id, text=text, source=source, model=model, embedding=embedding(), cost=1),
            )

    def forget(self, subject: str, entry_id: uuid.UUID, once: Once | None = None) -> bool:
        """Whether the entry was there; `once`: the exchanged token's forget, claimed only when one is deleted."""
        try:
            with self.subject(subject) as cur:
                gone = cur.execute(FORGET, dict(subject=subject, id=entry_id)).rowcount == 1
                if gone:
                    _claim(cur, once)  # Spent rolls the deletion back
                return gone
        finally:
            self.held.drop(subject)  # a forgotten entry is not held here either

    def forget_all(self, subject: str) -> dict:
        """{fact, preference, episode: how many were deleted, at: the transaction's time}."""
        try:
            with self.subject(subject) as cur:
                cur.execute(WAIT_FOR_WRITES, dict(subject=subject))
                return cur.execute(FORGET_ALL, dict(subject=subject)).fetchone()
        finally:
            self.held.drop(subject)

    def recall(
        self,
        subject: str,
        question: str,
        query: np.ndarray | Callable[[], np.ndarray],
        model: str,
        threshold: float,
        limit: int,
        kinds: list[str] | None,
        hybrid: bool,
        gap: float = float("inf"),
        vector_alone: int = 1,
        lift: float = float("-inf"),
    ) -> list[dict]:
        """The subject's entries nearest the question. `query`: its embedding, or the function that makes it; then
        the connection is taken, the transaction begun and (hybrid) the text list found while it runs, so that the
        embedding is followed by one statement alone. The same entries either way (tests/memory/test_recall_store.py)."""
        params = dict(
            subject=subject,
            question=question,
            model=model,
            threshold=threshold,
            limit=limit,
            kinds=kinds,
            k=RRF_K,
            depth=DEPTH,
            gap=gap,
            vector_alone=vector_alone,
            lift=lift,
            **terms.parameters(question),
        )
        if not callable(query):
            with self.subject(subject) as cur:
                return cur.execute(RECALL_HYBRID if hybrid else RECALL_VECTOR, params | {"query": query}).fetchall()
        begun = self._aside.submit(self._begin_recall, subject, model, params if hybrid else None)
        try:
            params["query"] = query()
        except BaseException:
            begun.add_done_callback(lambda done: done.exception() is None and self._end_recall(done.result()[0]))
            raise
        conn, text, held = begun.result()
        if held is not None:  # ranked, cut and fused here: no statement after the embedding
            self._aside.submit(self._end_recall, conn)
            return held.recall(params, text if hybrid else None)
        try:
            if hybrid:
                params |= {"text_ids": [r[0] for r in text], "text_ranks": [r[1] for r in text]}
            with conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(RECALL_FUSED if hybrid else RECALL_VECTOR, params).fetchall()
        except BaseException:
            self._end_recall(conn)
            raise
        self._aside.submit(self._end_recall, conn)  # the transaction only read: ending it need not delay the answer
        return rows

    def standing(self, subject: str, model: str, query: np.ndarray, n: int) -> list[dict]:
        """The subject's `n` newest preferences embedded with `model`, each with its similarity to the query."""
        with self.subject(subject) as cur:
            return cur.execute(STANDING, {"subject": subject, "model": model, "query": query, "n": n}).fetchall()

    def _begin_recall(
        self, subject: str, model: str, text_params: dict | None
    ) -> tuple[psycopg.Connection, list[tuple], Held | None]:
        """A connection in the subject's read-only transaction, the text list if `text_params` asks for it, and the
        subject's entries as of this transaction's snapshot if this process holds them."""
        self.migrate()
        conn = self.pool.getconn()
        try:
            with conn.pipeline():  # one round trip after psycopg's BEGIN
                for statement in RECALL_TRANSACTION:
                    conn.execute(statement)
                conn.execute(SET_SUBJECT, (subject,))
                version = conn.execute(VERSION, (subject,))
                text = conn.execute(RECALL_TEXT, text_params).fetchall() if text_params is not None else []
            held, version = None, version.fetchone()[0]
            if self.held.holds(subject, model, version):
                held = self.held.get(subject, model, version)
                if held is None and self.held.begin_loading(subject, model):
                    # Postgres ranks this recall; the next ranks what is held. Loading 10,000 entries takes longer
                    # than an embedding, so no recall waits for it.
                    self._holding.submit(self._hold, subject, model)
        except BaseException:
            self._end_recall(conn)
            raise
        return conn, text, held

    def _hold(self, subject: str, model: str) -> None:
        """Load and hold the subject's entries of the model, as of one snapshot and the version it reads."""
        try:
            with self.pool.connection() as conn, conn.transaction():
                conn.execute(RECALL_TRANSACTION[0])
                conn.execute(SET_SUBJECT, (subject,))
                version = conn.execute(VERSION, (subject,)).fetchone()[0]
                self.held.put(subject, Held.load(conn, subject, model, version))
        except Exception:  # recalls go on in Postgres; the next one tries again
            log.exception("loading a subject's entries to hold failed")
        finally:
            self.held.end_loading(subject, model)

    def wait_held(self) -> None:
        """Wait for the entries being loaded to be held (for tests and benchmarks)."""
        self._holding.submit(lambda: None).result()

    def _end_recall(self, conn: psycopg.Connection) -> None:
        try:
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
                conn.commit()  # it only read; psycopg's rollback would also drop the connection's prepared statements
            else:
                conn.rollback()
        finally:
            self.pool.putconn(conn)  # a broken connection is discarded by the pool

    def stale(self, subject: str, model: str, limit: int) -> list[dict]:
        with self.subject(subject) as cur:
            return cur.execute(STALE, dict(subject=subject, model=model, limit=limit)).fetchall()

    def reembed(self, subject: str, rows: list[tuple[uuid.UUID, np.ndarray]], model: str) -> None:
        with self.subject(subject) as cur:
            cur.executemany(REEMBED, [dict(subject=subject, id=i, model=model, embedding=e) for i, e in rows])
