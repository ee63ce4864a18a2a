"""The work of memory: keep, correct, forget and recall a subject's entries, and keep episodes."""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from agentfn.shared.problems import ProblemError, not_found, problem_type, unprocessable

from . import notes, quotas
from .quotas import Quotas, Survey, Watchlist
from .schemas import EPISODE_MAX_CHARS, EPISODE_MAX_WORDS, KINDS, MAX_RECALL
from .stays import STAYS
from .store import Once, Spent, Store

SPENT = {
    "write": "this exchanged token has kept its one note: each token exchanged for memory keeps one note and forgets "
    "one entry; nothing was kept",
    "forget": "this exchanged token has forgotten its one entry: each token exchanged for memory keeps one note and "
    "forgets one entry; nothing was forgotten",
}


def spent(use: str) -> ProblemError:
    return ProblemError(403, "Forbidden", SPENT[use], type=problem_type("exchanged-token-spent"))


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


def check_note(text: str) -> None:
    """Memory keeps notes, not junk: every writer's text passes the one guard."""
    reason = notes.refusal(text)
    if reason:
        raise ProblemError(422, "Not a note", f"text: {reason}", type=notes.PROBLEM_TYPE)


class Memory:
    def __init__(self, store: Store, embedder, *, max_tokens: int, quotas: Quotas | None = None):
        self.store = store
        self.embedder = embedder
        self.model = embedder.config.name
        self.threshold = embedder.config.threshold
        self.max_tokens = max_tokens
        self.quotas = quotas or Quotas()
        # A subject's entries come back recall after recall: each is tokenized once per process, not once per recall.
        self._count_tokens = functools.lru_cache(maxsize=4096)(embedder.count_tokens)
        self.watchlist = Watchlist()

    def _embedding(self, text: str) -> Callable[[], np.ndarray]:
        """The text's embedding, begun now: the store waits for it only once the write is admitted, so the write's
        statements up to its check run meanwhile, and a refused write answers at once (the embedding is dropped)."""
        begun = self.embedder.begin_documents([text])
        return lambda: begun()[0]

    def _watch(self, subject: str, survey: Survey) -> None:
        if survey.duplicate or quotas.near(survey, self.quotas):
            self.watchlist.add(subject)

    def list(self, subject: str, kind: str | None, limit: int, offset: int) -> list[dict]:
        return [_entry(r) for r in self.store.list(subject, kind, limit, offset)]

    def create(self, subject: str, kind: str, text: str, source: str, once: Once | None = None) -> tuple[dict, bool]:
        """(the entry, whether it was already kept): a note the subject already has is not kept twice. `once`: the
        exchanged token's one write, claimed with it."""
        check_note(text)

        def admit(survey: Survey) -> dict | None:
            self._watch(subject, survey)
            if survey.duplicate:
                return survey.duplicate
            quotas.check_cap(survey, self.quotas)
            quotas.check_rate(survey, self.quotas)
            return None

        # Checked under the subject's lock while the embedding runs; for a watched subject, before it is begun too.
        if subject in self.watchlist and (existing := admit(self.store.survey(subject, text, self.quotas))) is not None:
            return _entry(existing), True
        try:
            row, existing = self.store.insert(
                subject,
                kind,
                text,
                source,
                self.model,
                self._embedding(text),
                quotas=self.quotas,
                cost=1,
                check=admit,
                once=once,
            )
        except Spent:
            raise spent("write") from None
        return _entry(row), existing

    def correct(self, subject: str, entry_id: uuid.UUID, text: str | None, source: str | None) -> dict:
        current = self.store.get(subject, entry_id)
        if current is None:
            raise not_found("no entry with this id")
        if current["kind"] == "episode" and text is not None:
            raise unprocessable("text: an episode's text is the session's summary; forget it instead")
        if text is not None:
            check_note(text)

        def admit(survey: Survey) -> None:
            self._watch(subject, survey)
            # Two entries saying the same note is what keeping notes once prevents; a correction that would
            # make one is most likely aimed at the wrong entry, so it is refused, not merged.
            if survey.duplicate:
                raise ProblemError(
                    409,
                    "Conflict",
                    f"entry {survey.duplicate['id']} already says this; forget this "
                    "entry instead, or correct it to say something else",
                    type=problem_type("duplicate-note"),
                    entry_id=str(survey.duplicate["id"]),
                )
            quotas.check_rate(survey, self.quotas)

        # Only a new text is compared with the subject's other notes (None: the source alone changes).
        if subject in self.watchlist:
            admit(self.store.survey(subject, text, self.quotas, exclude=entry_id))
        kept = current["text"] if text is None else text
        row = self.store.correct(
            subject,
            entry_id,
            kept,
            source or current["source"],
            self.model,
            self._embedding(kept),
            quotas=self.quotas,
            compare=text,
            check=admit,
        )
        if row is None:  # forgotten meanwhile
            raise not_found("no entry with this id")
        return _entry(row)

    def forget(self, subject: str, entry_id: uuid.UUID, once: Once | None = None) -> None:
        try:
            gone = self.store.forget(subject, entry_id, once)
        except Spent:
            raise spent("forget") from None
        if not gone:
            raise not_found("no entry with this id")

    def forget_all(self, subject: str) -> dict:
        """A receipt of forgetting every entry of the subject: counts by kind and when, never text; and every record
        of the platform that still names the subject, and why (`stays`)."""
        row = self.store.forget_all(subject)
        deleted = {kind: row[kind] for kind in KINDS}
        return {
            "deleted": deleted,
            "total": sum(deleted.values()),
            "at": row["at"].isoformat(),
            "stays": [dict(item) for item in STAYS],
        }

    def recall(
        self,
        subject: str,
        query: str,
        kinds: list[str] | None,
        limit: int | None,
        max_tokens: int | None,
        preferences: int = 0,
    ) -> dict:
        """The nearest entries (and, with `preferences`, the newest preferences however near), within the caps."""
        config = self.embedder.config
        limit = int(min(limit or MAX_RECALL, MAX_RECALL, config.cap))  # JSON may say 3.0
        budget = min(max_tokens or self.max_tokens, self.max_tokens)
        embedded: list[np.ndarray] = []

        def embed() -> np.ndarray:
            embedded.append(self.embedder.embed_queries([query])[0])
            return embedded[0]

        rows = self.store.recall(
            subject,
            query,
            embed,  # the store begins its work meanwhile
            self.model,
            self.threshold,
            limit,
            kinds,
            hybrid=config.recall == "hybrid",
            gap=config.gap,
            vector_alone=config.vector_alone,
            lift=config.lift,
        )
        # At most all places but one: the entry nearest what the person said keeps the first.
        wanted = min(int(preferences), limit - 1) if kinds is None or "preference" in kinds else 0
        if wanted:
            standing = [
                row
                for row in self.store.standing(subject, self.model, embedded[0], wanted)
                if row["id"] not in {r["id"] for r in rows}
            ]
            # The nearest first, then the standing preferences not among them, as many as the limit leaves room for
            # once the nearest have given up their last places to them.
            nearest = rows[: max(limit - len(standing), limit - wanted)]
            rows = nearest + standing[: limit - len(nearest)]
        entries, spent = [], 0
        for row in rows:
            tokens = self._count_tokens(row["text"])
            if spent + tokens > budget:
                break
            spent += tokens
            entry = _entry(row) | {
                "similarity": round(float(row["similarity"]), 4),
                "matched": row["matched"],
                "tokens": tokens,
            }
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
        check_note(text)

        # An episode counts against the entry cap; not against the write rate: a session's end comes once per
        # session, and the summary it keeps was already paid for in the caller's model tokens.
        def admit(survey: Survey) -> None:
            self._watch(subject, survey)
            quotas.check_cap(survey, self.quotas)

        if subject in self.watchlist:
            admit(self.store.survey(subject, None, self.quotas))
        source = f"session:{session_id}" if session_id else "session"
        row, _ = self.store.insert(
            subject,
            "episode",
            text.strip(),
            source,
            self.model,
            self._embedding(text),
            quotas=self.quotas,
            cost=0,
            check=admit,
            session_id=session_id,
        )
        return _entry(row)

    def reembed(self, subject: str, batch: int = 64) -> int:
        """Move the subject's entries embedded by another model to the configured one; returns how many."""
        moved = 0
        while rows := self.store.stale(subject, self.model, batch):
            vectors = self.embedder.embed_documents([r["text"] for r in rows])
            self.store.reembed(subject, [(r["id"], v) for r, v in zip(rows, vectors, strict=True)], self.model)
            moved += len(rows)
        return moved
