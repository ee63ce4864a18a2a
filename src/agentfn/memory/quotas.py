"""A subject's quotas: how many entries it keeps, and how fast it writes (each write costs an embedding).

The rate is a bucket per subject holding up to the per-minute rate of writes, refilled evenly (one write
every 60/rate seconds): a burst of a minute's writes, then the steady rate. The state lives in Postgres
(memory.quotas) and every write locks its subject's row, so the limits hold across processes and replicas.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from agentfn.shared.problems import ProblemError, problem_type

CAP_RETRY_SECONDS = 3600  # the cap does not lift by itself: a client is told to come back much later


@dataclass(frozen=True)
class Quotas:
    """A subject's quotas: the entries it may keep, and its writes a minute (the bucket's size and refill)."""

    max_entries: int = 2000
    writes_per_minute: int = 60


@dataclass(frozen=True)
class Survey:
    """What a write must know of its subject: read under the subject's lock, or before it as a pre-check."""

    entries: int  # the subject's entries of every kind (counted up to the cap)
    available: float  # writes the bucket holds now
    duplicate: dict | None  # an entry (not an episode) whose text is the same note


class QuotaSpent(ProblemError):
    """429 with the seconds to wait, which the door sends as Retry-After."""

    def __init__(self, detail: str, kind: str, limit: int, retry_after: int):
        super().__init__(429, "Too Many Requests", detail, type=problem_type(kind), limit=limit)
        self.retry_after = retry_after


def check_cap(survey: Survey, quotas: Quotas) -> None:
    if survey.entries >= quotas.max_entries:
        raise QuotaSpent(
            f"this memory holds its {quotas.max_entries} entries, the most it keeps; forget some entries to keep new ones",
            "entry-cap",
            quotas.max_entries,
            CAP_RETRY_SECONDS,
        )


def check_rate(survey: Survey, quotas: Quotas) -> None:
    if survey.available < 1:
        wait = max(1, math.ceil((1 - survey.available) * 60 / quotas.writes_per_minute))
        raise QuotaSpent(
            f"at most {quotas.writes_per_minute} writes a minute; try again in {wait} s",
            "write-rate",
            quotas.writes_per_minute,
            wait,
        )


def near(survey: Survey, quotas: Quotas) -> bool:
    """Refused, or a write or two from being refused (the bucket, the cap)."""
    return survey.available < 3 or survey.entries >= quotas.max_entries - 2


class Watchlist:
    """The subjects this process saw lately refused, answered with a duplicate or near a limit (the most recent `size`,
    each for `seconds`).

    A write's embedding is begun beside its locked survey, so a write then refused has spent one in vain; a watched
    subject's write reads the survey first, as a caller over its limits must not spend embeddings. So at most about
    one embedding is spent in vain per subject, process and `seconds` (writes that race each other aside).
    """

    def __init__(self, size: int = 4096, seconds: float = 60.0):
        self._size, self._seconds = size, seconds
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, subject: str) -> None:
        with self._lock:
            self._seen[subject] = time.monotonic()
            self._seen.move_to_end(subject)
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)

    def __contains__(self, subject: str) -> bool:
        with self._lock:
            seen = self._seen.get(subject)
            if seen is not None and time.monotonic() - seen >= self._seconds:
                del self._seen[subject]
                return False
            return seen is not None
