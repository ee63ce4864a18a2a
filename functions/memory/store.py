"""Memory's storage: SQL over Postgres + pgvector. Every statement filters by subject; RLS is the second wall."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import psycopg
from agentfn.shared import db
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

from . import terms

SCHEMA = "memory"

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

KINDS = "(%(kinds)s::text[] IS NULL OR e.kind = ANY(%(kinds)s))"

# Similarity alone: nearest first among the subject's vectors of the configured model, above the floor.
RECALL_VECTOR = f"""
WITH nearest AS (
    SELECT e.id, 1 - (e.embedding <=> %(query)s::halfvec) AS similarity
    FROM entries e
    WHERE e.subject = %(subject)s AND e.model = %(model)s AND {KINDS}
      AND e.embedding <=> %(query)s::halfvec <= 1 - %(threshold)s
    ORDER BY e.embedding <=> %(query)s::halfvec
    LIMIT %(limit)s
)
SELECT {", ".join("e." + c for c in COLUMNS.split(", "))}, n.similarity, ARRAY['vector'] AS matched
FROM nearest n JOIN entries e ON e.id = n.id AND e.subject = %(subject)s
ORDER BY n.similarity DESC
"""

# Hybrid (studies/recall): the subject's entries ranked twice, by vector (above the floor) and by
# full-text terms, fused by reciprocal rank (k = 60). Shown: what either list ranks first, and
# whatever both lists found (a fused score of at least 1/(k+1)).
# A question's terms: split by the notes' own parser, function words dropped, stems OR'ed as prefixes.
# Each stem is quoted as one tsquery lexeme, so a word such as "1.30" or "a/b" stays one term.
QUESTION_TERMS = """
SELECT to_tsquery('simple', string_agg(quote_lexeme(left(lexeme, %(stem)s)) || ':*', ' | '))
FROM unnest(to_tsvector('simple', fold(%(question)s)))
WHERE lexeme <> ALL(%(stop)s) AND length(lexeme) > 1
"""

RECALL_HYBRID = f"""
WITH q AS (SELECT %(query)s::halfvec AS v, ({QUESTION_TERMS}) AS t),
by_vector AS (
    SELECT e.id, row_number() OVER (ORDER BY e.embedding <=> q.v) AS rank
    FROM entries e, q
    WHERE e.subject = %(subject)s AND e.model = %(model)s AND {KINDS} AND e.embedding <=> q.v <= 1 - %(threshold)s
    ORDER BY e.embedding <=> q.v
    LIMIT %(depth)s
),
by_text AS (
    SELECT e.id, rank() OVER (ORDER BY ts_rank(e.terms, q.t, 1) DESC) AS rank
    FROM entries e, q
    WHERE e.subject = %(subject)s AND e.model = %(model)s AND {KINDS} AND e.terms @@ q.t
    ORDER BY ts_rank(e.terms, q.t, 1) DESC
    LIMIT %(depth)s
),
fused AS (
    SELECT id, sum(1.0 / (%(k)s + rank)) AS score, array_agg(list ORDER BY list DESC) AS matched
    FROM (SELECT id, rank, 'vector' AS list FROM by_vector UNION ALL SELECT id, rank, 'text' FROM by_text) lists
    GROUP BY id
)
SELECT {", ".join("e." + c for c in COLUMNS.split(", "))}, 1 - (e.embedding <=> q.v) AS similarity, f.matched
FROM fused f JOIN entries e ON e.id = f.id AND e.subject = %(subject)s, q
WHERE f.score >= 1.0 / (%(k)s + 1)
ORDER BY f.score DESC, similarity DESC
LIMIT %(limit)s
"""
RRF_K = 60
DEPTH = 100  # ranks past this cannot lift a note over the cut unless both lists hold it near the top

STALE = """
SELECT id, text FROM entries WHERE subject = %(subject)s AND model <> %(model)s ORDER BY id LIMIT %(limit)s
"""
REEMBED = """
UPDATE entries SET model = %(model)s, embedding = %(embedding)s::halfvec
WHERE subject = %(subject)s AND id = %(id)s
"""


def _configure(conn: psycopg.Connection) -> None:
    register_vector(conn)
    conn.commit()


class Store(db.SchemaStore):
    schema, package = SCHEMA, "agentfn.memory"

    def __init__(self, dsn: str, *, pool_size: int = 4):
        super().__init__(dsn, pool_size=pool_size, configure=_configure)

    @contextmanager
    def subject(self, subject: str) -> Iterator[psycopg.Cursor]:
        """One transaction bound to one subject: the setting the RLS policy reads lives only as long as it."""
        self.migrate()
        with self.pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            cur.execute("SELECT set_config('agentfn.subject', %s, true)", (subject,))
            yield cur

    def list(self, subject: str, kind: str | None, limit: int, offset: int) -> list[dict]:
        with self.subject(subject) as cur:
            return cur.execute(LIST, dict(subject=subject, kind=kind, limit=limit, offset=offset)).fetchall()

    def get(self, subject: str, entry_id: uuid.UUID) -> dict | None:
        with self.subject(subject) as cur:
            return cur.execute(GET, dict(subject=subject, id=entry_id)).fetchone()

    def insert(self, subject: str, kind: str, text: str, source: str, model: str, embedding: np.ndarray,
               session_id: str | None = None) -> dict:
        with self.subject(subject) as cur:
            return cur.execute(INSERT, dict(id=uuid.uuid4(), subject=subject, kind=kind, text=text, source=source,
                                            session_id=session_id, model=model, embedding=embedding)).fetchone()

    def correct(self, subject: str, entry_id: uuid.UUID, text: str, source: str, model: str,
                embedding: np.ndarray) -> dict | None:
        with self.subject(subject) as cur:
            return cur.execute(CORRECT, dict(subject=subject, id=entry_id, text=text, source=source, model=model,
                                             embedding=embedding)).fetchone()

    def forget(self, subject: str, entry_id: uuid.UUID) -> bool:
        with self.subject(subject) as cur:
            return cur.execute(FORGET, dict(subject=subject, id=entry_id)).rowcount == 1

    def recall(self, subject: str, question: str, query: np.ndarray, model: str, threshold: float, limit: int,
               kinds: list[str] | None, hybrid: bool) -> list[dict]:
        params = dict(subject=subject, question=question, query=query, model=model, threshold=threshold,
                      limit=limit, kinds=kinds, k=RRF_K, depth=DEPTH, stem=terms.STEM, stop=terms.STOP)
        with self.subject(subject) as cur:
            return cur.execute(RECALL_HYBRID if hybrid else RECALL_VECTOR, params).fetchall()

    def stale(self, subject: str, model: str, limit: int) -> list[dict]:
        with self.subject(subject) as cur:
            return cur.execute(STALE, dict(subject=subject, model=model, limit=limit)).fetchall()

    def reembed(self, subject: str, rows: list[tuple[uuid.UUID, np.ndarray]], model: str) -> None:
        with self.subject(subject) as cur:
            cur.executemany(REEMBED, [dict(subject=subject, id=i, model=model, embedding=e) for i, e in rows])
