"""The work of memory: keep, correct, forget and recall a subject's entries, and keep episodes."""

from __future__ import annotations

import re
import uuid
from typing import Any

from agentfn.shared.problems import not_found, unprocessable

from .schemas import EPISODE_MAX_CHARS, EPISODE_MAX_WORDS, MAX_RECALL
from .store import Store


def _entry(row: dict[str, Any]) -> dict[str, Any]:
    out = {
        "id": str(row["id"]),
        "kind": row["kind"],
        "text": row["text"],
        "source": row["source"],
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
        "model": row["model"],
    }
    if row.get("session_id"):
        out["session_id"] = row["session_id"]
    return out


def parse_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise not_found("no entry with this id") from None


class Memory:
    def __init__(self, store: Store, embedder, *, max_tokens: int):
        self.store = store
        self.embedder = embedder
        self.model = embedder.config.name
        self.threshold = embedder.config.threshold
        self.max_tokens = max_tokens

    def _document(self, text: str):
        return self.embedder.embed_documents([text])[0]

    def list(self, subject: str, kind: str | None, limit: int, offset: int) -> list[dict]:
        return [_entry(r) for r in self.store.list(subject, kind, limit, offset)]

    def create(self, subject: str, kind: str, text: str, source: str) -> dict:
        return _entry(self.store.insert(subject, kind, text, source, self.model, self._document(text)))

    def correct(self, subject: str, entry_id: uuid.UUID, text: str | None, source: str | None) -> dict:
        current = self.store.get(subject, entry_id)
        if current is None:
            raise not_found("no entry with this id")
        if current["kind"] == "episode" and text is not None:
            raise unprocessable("text: an episode's text is the session's summary; forget it instead")
        text = current["text"] if text is None else text
        row = self.store.correct(subject, entry_id, text, source or current["source"], self.model,
                                 self._document(text))
        if row is None:  # forgotten meanwhile
            raise not_found("no entry with this id")
        return _entry(row)

    def forget(self, subject: str, entry_id: uuid.UUID) -> None:
        if not self.store.forget(subject, entry_id):
            raise not_found("no entry with this id")

    def recall(self, subject: str, query: str, kinds: list[str] | None, limit: int | None,
               max_tokens: int | None) -> dict:
        limit = min(limit or MAX_RECALL, MAX_RECALL)
        budget = min(max_tokens or self.max_tokens, self.max_tokens)
        vector = self.embedder.embed_queries([query])[0]
        rows = self.store.recall(subject, query, vector, self.model, self.threshold, limit, kinds,
                                 hybrid=self.embedder.config.recall == "hybrid")
        entries, spent = [], 0
        for row in rows:
            tokens = self.embedder.count_tokens(row["text"])
            if spent + tokens > budget:
                break
            spent += tokens
            entry = _entry(row) | {"similarity": round(float(row["similarity"]), 4), "matched": row["matched"],
                                   "tokens": tokens}
            if row["kind"] == "episode":
                entry["date"] = row["created_at"].date().isoformat()
            entries.append(entry)
        return {"entries": entries, "threshold": self.threshold, "model": self.model}

    def write_episode(self, subject: str, text: str, session_id: str | None) -> dict:
        # The model function summarises; memory checks the rules again rather than trusting it.
        words = len(re.findall(r"\S+", text))
        if words > EPISODE_MAX_WORDS:
            raise unprocessable(f"text: an episode has at most {EPISODE_MAX_WORDS} words, this has {words}")
        if len(text) > EPISODE_MAX_CHARS:
            raise unprocessable(f"text: an episode has at most {EPISODE_MAX_CHARS} characters")
        source = f"session:{session_id}" if session_id else "session"
        row = self.store.insert(subject, "episode", text.strip(), source, self.model, self._document(text),
                                session_id=session_id)
        return _entry(row)

    def reembed(self, subject: str, batch: int = 64) -> int:
        """Move the subject's entries embedded by another model to the configured one; returns how many."""
        moved = 0
        while rows := self.store.stale(subject, self.model, batch):
            vectors = self.embedder.embed_documents([r["text"] for r in rows])
            self.store.reembed(subject, [(r["id"], v) for r, v in zip(rows, vectors, strict=True)], self.model)
            moved += len(rows)
        return moved
