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

# Nearest first among the subject's vectors of the configured model; only then the text of the few kept.
RECALL = f"""
WITH nearest AS (
    SELECT id, 1 - (embedding <=> %(query)s::halfvec) AS similarity
    FROM entries
    WHERE subject = %(subject)s AND model = %(model)s
      AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s))
      AND embedding <=> %(query)s::halfvec <= 1 - %(threshold)s
    ORDER BY embedding <=> %(query)s::halfvec
    LIMIT %(limit)s
)
SELECT {", ".join("e." + c for c in COLUMNS.split(", "))}, n.similarity
FROM nearest n JOIN entries e ON e.id = n.id AND e.subject = %(subject)s
ORDER BY n.similarity DESC
"""

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


class Store:
    def __init__(self, dsn: str, *, pool_size: int = 4):
        self.pool = db.open_pool(dsn, schema=SCHEMA, size=pool_size, configure=_configure)
        self._migrated = False

    def close(self) -> None:
        self.pool.close()

    def migrate(self) -> None:
        """Apply pending migrations once per process; retried on the next use while the database is down."""
        if self._migrated:
            return
        with self.pool.connection() as conn:
            db.migrate(conn, SCHEMA, "agentfn.memory")
        self._migrated = True

    def ping(self) -> bool:
        with self.pool.connection(timeout=2) as conn:
            conn.execute("SELECT 1")
        return True

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

    def recall(self, subject: str, query: np.ndarray, model: str, threshold: float, limit: int,
               kinds: list[str] | None) -> list[dict]:
        with self.subject(subject) as cur:
            return cur.execute(RECALL, dict(subject=subject, query=query, model=model, threshold=threshold,
                                            limit=limit, kinds=kinds)).fetchall()

    def stale(self, subject: str, model: str, limit: int) -> list[dict]:
        with self.subject(subject) as cur:
            return cur.execute(STALE, dict(subject=subject, model=model, limit=limit)).fetchall()

    def reembed(self, subject: str, rows: list[tuple[uuid.UUID, np.ndarray]], model: str) -> None:
        with self.subject(subject) as cur:
            cur.executemany(REEMBED, [dict(subject=subject, id=i, model=model, embedding=e) for i, e in rows])
