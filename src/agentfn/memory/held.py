"""The entries a memory process holds between recalls, so that a recall ranks, cuts and fuses them itself.

After its question is embedded, a recall ran one statement: the similarity of each of the subject's entries, the
cut and the fusion with the text list, in Postgres (about 1 ms for 1,000 entries, 4 ms and more for 10,000). With
the subject's entries held here, that is one matrix-vector product and a few lists in the process, and the
embedding is followed by no round trip at all. `Held.recall` answers exactly as store.RECALL_HYBRID and
store.RECALL_VECTOR do (tests/memory/test_recall_store.py compares them), up to the last bits of a similarity.

The entries are loaded in a snapshot of their own, after a recall that found them missing (Postgres ranks that
one), and serve only the subject's later recalls that read the same version (migrations/0004_entry_versions.sql):
a write, a correction or a forgetting on any replica makes the next recall ask Postgres and load them again. A
forgetting in this process drops them at once, and entries unused for `idle` seconds go too.
"""

from __future__ import annotations

import collections
import datetime as dt
import threading
import time
import uuid
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import psycopg

# The subject's entries of one model in one row: ids and vectors run together (pgvector's binary halfvec is a 2-byte
# dimension count, 2 bytes unused, then the values, big-endian), the other columns as JSON, all in the same order.
LOAD = """
SELECT string_agg(uuid_send(id), ''::bytea) AS ids, string_agg(halfvec_send(embedding), ''::bytea) AS vectors,
       json_agg(json_build_array(kind, text, source, session_id, created_at, updated_at)) AS rows
FROM entries WHERE subject = %(subject)s AND model = %(model)s
"""
ROW_BYTES = 200  # a held row's Python objects beyond its text and source, about


@dataclass(frozen=True, eq=False)
class Held:
    """One subject's entries of one model, as of one version."""

    model: str
    version: int
    ids: np.ndarray  # (n, 16) uint8: each entry's id
    vectors: np.ndarray  # (n, dimensions) float32: the stored halfvec values
    rows: list  # [kind, text, source, session_id, created_at, updated_at] of each entry (times as ISO text)
    kinds: np.ndarray  # (n,) each entry's kind
    index: dict  # id bytes -> row
    nbytes: int  # about: the arrays, the texts and sources, and each row's Python objects

    @classmethod
    def load(cls, conn: psycopg.Connection, subject: str, model: str, version: int) -> Held:
        ids, vectors, rows = conn.execute(LOAD, dict(subject=subject, model=model), binary=True).fetchone()
        if not ids:
            return cls(model, version, np.empty((0, 16), np.uint8), np.empty((0, 0), np.float32), [], np.empty(0), {}, 0)
        dimensions = int.from_bytes(vectors[:2], "big")
        stored = np.frombuffer(vectors, np.dtype([("head", ">u4"), ("values", ">f2", (dimensions,))]))
        ids, vectors = np.frombuffer(ids, np.uint8).reshape(-1, 16), stored["values"].astype(np.float32)
        texts = sum(len(row[1]) + len(row[2]) for row in rows)
        return cls(
            model,
            version,
            ids,
            vectors,
            rows,
            np.array([row[0] for row in rows]),
            {ids[i].tobytes(): i for i in range(len(ids))},
            ids.nbytes + vectors.nbytes + texts + ROW_BYTES * len(rows),
        )

    def recall(self, params: dict, text: list[tuple] | None) -> list[dict]:
        """The rows store.RECALL_HYBRID (with `text`, the text list's (id, rank)) or store.RECALL_VECTOR answers."""
        # The statement casts the query to halfvec: the same rounding here.
        query = np.asarray(params["query"], np.float32).astype(np.float16).astype(np.float32)
        similarity = self.vectors @ query if len(self.rows) else np.empty(0, np.float32)
        nearest = self._nearest(similarity, params)
        if text is None:
            shown = [(i, ["vector"]) for i, _ in nearest[: params["limit"]]]
            return [self._row(i, similarity, matched) for i, matched in shown]

        # Reciprocal rank fusion, in exact fractions: Postgres sums numeric, where a tie is a tie.
        k = params["k"]
        fused: dict[int, list] = {}  # row -> [score, matched, vector rank]
        for i, rank in nearest:
            fused[i] = [Fraction(1, k + rank), ["vector"], rank]
        for entry_id, rank in text:
            i = self.index.get(entry_id.bytes)
            if i is None:  # not of this snapshot's entries of the model; the statement's join drops it too
                continue
            found = fused.setdefault(i, [Fraction(0), [], None])
            found[0] += Fraction(1, k + rank)
            found[1].append("text")
        shown = [
            (score, float(similarity[i]), i, matched)
            for i, (score, matched, vector_rank) in fused.items()
            if score >= Fraction(1, k + 1) or (vector_rank is not None and vector_rank <= params["vector_alone"])
        ]
        shown.sort(key=lambda s: (s[0], s[1]), reverse=True)
        return [self._row(i, similarity, matched) for _, _, i, matched in shown[: params["limit"]]]

    def _nearest(self, similarity: np.ndarray, params: dict) -> list[tuple[int, int]]:
        """(row, rank) of store.NEAREST: the `depth` nearest of the kinds asked, cut by the floor, the lift over the
        crowd of the 5 nearest and the first drop larger than the gap."""
        chosen = np.arange(len(self.rows))
        if params["kinds"] is not None:
            chosen = np.flatnonzero(np.isin(self.kinds, params["kinds"]))
        depth = min(params["depth"], len(chosen))
        if not depth:
            return []
        top = chosen[np.argpartition(-similarity[chosen], depth - 1)[:depth]]
        top = top[np.argsort(-similarity[top], kind="stable")]
        values = similarity[top].astype(float)
        crowd = float(np.mean(values[:5]))
        nearest, previous = [], None
        for rank, (i, value) in enumerate(zip(top.tolist(), values.tolist(), strict=True), start=1):
            if value < params["threshold"] or value - crowd < params["lift"]:
                continue
            if previous is not None and previous - value > params["gap"]:
                break
            nearest.append((i, rank))
            previous = value
        return nearest

    def _row(self, i: int, similarity: np.ndarray, matched: list[str]) -> dict:
        kind, text, source, session_id, created_at, updated_at = self.rows[i]
        return {
            "id": uuid.UUID(bytes=self.ids[i].tobytes()),
            "kind": kind,
            "text": text,
            "source": source,
            "session_id": session_id,
            "model": self.model,
            "created_at": dt.datetime.fromisoformat(created_at),
            "updated_at": dt.datetime.fromisoformat(updated_at),
            "similarity": float(similarity[i]),
            "matched": matched,
        }


class HeldEntries:
    """Held entries by (subject, model), the least recently used dropped first beyond `max_bytes`."""

    def __init__(self, max_bytes: int, idle: float = 600.0):
        self.max_bytes, self.idle = max_bytes, idle
        self._held: collections.OrderedDict[tuple[str, str], tuple[Held, float]] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        # Subjects whose entries alone outgrow max_bytes, by the version that did: Postgres ranks them.
        self._too_big: collections.OrderedDict[tuple[str, str], int] = collections.OrderedDict()
        self._loading: set[tuple[str, str]] = set()

    def begin_loading(self, subject: str, model: str) -> bool:
        """True if the caller is to load the subject's entries: none is loading them already."""
        with self._lock:
            if (subject, model) in self._loading:
                return False
            self._loading.add((subject, model))
            return True

    def end_loading(self, subject: str, model: str) -> None:
        with self._lock:
            self._loading.discard((subject, model))

    def holds(self, subject: str, model: str, version: int) -> bool:
        """Whether the subject's entries are held here or may be: not when they outgrew max_bytes at this version."""
        with self._lock:
            return self.max_bytes > 0 and self._too_big.get((subject, model)) != version

    def get(self, subject: str, model: str, version: int) -> Held | None:
        now = time.monotonic()
        with self._lock:
            self._drop_idle(now)
            found = self._held.get((subject, model))
            if found is None or found[0].version != version:
                return None
            self._held[(subject, model)] = (found[0], now)
            self._held.move_to_end((subject, model))
            return found[0]

    def put(self, subject: str, held: Held) -> None:
        key = (subject, held.model)
        with self._lock:
            self._pop(key)
            if held.nbytes > self.max_bytes:
                self._too_big[key] = held.version
                while len(self._too_big) > 1024:
                    self._too_big.popitem(last=False)
                return
            while self._bytes + held.nbytes > self.max_bytes:
                self._pop(next(iter(self._held)))
            self._held[key] = (held, time.monotonic())
            self._bytes += held.nbytes

    def drop(self, subject: str) -> None:
        with self._lock:
            for key in [key for key in self._held if key[0] == subject]:
                self._pop(key)

    def _drop_idle(self, now: float) -> None:
        while self._held:
            key, (_, used) = next(iter(self._held.items()))
            if now - used < self.idle:
                break
            self._pop(key)

    def _pop(self, key: tuple[str, str]) -> None:
        found = self._held.pop(key, None)
        if found is not None:
            self._bytes -= found[0].nbytes
