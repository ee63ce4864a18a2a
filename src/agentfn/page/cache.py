"""The short-lived cache of pages a caller opened, so paging through one neither fetches nor counts again.

Per process and in memory: keyed by (subject, URL), so one caller never sees another's copy; entries
expire after a few minutes and the least recently used go first when the page or character bound is
reached. A miss (another replica, an expired entry) only costs a fetch. Its content is never logged.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from .reading import Reading


class PageCache:
    def __init__(self, *, ttl: float, max_pages: int, max_chars: int, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.max_pages, self.max_chars, self.clock = ttl, max_pages, max_chars, clock
        self._entries: OrderedDict[tuple[str, str], tuple[float, Reading]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, subject: str, url: str) -> Reading | None:
        with self._lock:
            entry = self._entries.get((subject, url))
            if entry is None:
                return None
            if entry[0] <= self.clock():
                self._drop((subject, url))
                return None
            self._entries.move_to_end((subject, url))
            return entry[1]

    def put(self, subject: str, urls: list[str], reading: Reading) -> None:
        """Keep `reading` under each URL it answers (the one asked for and the one it ended at)."""
        if self.ttl <= 0 or self.max_pages <= 0 or len(reading.text) > self.max_chars:
            return
        expires = self.clock() + self.ttl
        with self._lock:
            for url in dict.fromkeys(urls):
                key = (subject, url)
                if key in self._entries:
                    self._drop(key)
                self._entries[key] = (expires, reading)
                self._chars += len(reading.text)
            while self._entries and (len(self._entries) > self.max_pages or self._chars > self.max_chars):
                self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[str, str]) -> None:
        _, reading = self._entries.pop(key)
        self._chars -= len(reading.text)
