"""One clock for a whole fetch (DNS, connect, TLS, every redirect and the body), kept by one watchdog thread.

When the deadline passes, the watchdog shuts down every socket the fetch opened, so a server that drips one
byte a second cannot hold the fetch open.
"""

from __future__ import annotations

import heapq
import socket
import threading
import time


class Deadline:
    """One clock for the whole fetch; when it runs out, the watchdog shuts down every socket it watches."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.closed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        _WATCHDOG.add(self)

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
        if self.expired:
            self.expire()

    def expire(self) -> None:
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True


class _Watchdog:
    """One thread for every fetch of the process: it wakes at the earliest deadline (no thread per fetch)."""

    def __init__(self):
        self._heap: list[tuple[float, int, Deadline]] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._until: float | None = None  # when the thread wakes next by itself (None: only when told)

    def add(self, deadline: Deadline) -> None:
        with self._wake:
            while self._heap and self._heap[0][2].closed:  # fetches that ended: dropped here, not by waking the thread
                heapq.heappop(self._heap)
            heapq.heappush(self._heap, (deadline.end, id(deadline), deadline))
            if self._thread is None or not self._thread.is_alive():  # also after a fork (gunicorn workers)
                self._thread = threading.Thread(target=self._run, name="page-deadlines", daemon=True)
                self._thread.start()
            elif self._until is None or deadline.end < self._until:  # waking the thread costs the GIL: only if due sooner
                self._wake.notify()

    def _run(self) -> None:
        with self._wake:
            while True:
                while self._heap and (self._heap[0][2].closed or self._heap[0][0] <= time.monotonic()):
                    _, _, deadline = heapq.heappop(self._heap)
                    if not deadline.closed:
                        deadline.expire()
                self._until = self._heap[0][0] if self._heap else None
                self._wake.wait(self._until - time.monotonic() if self._until is not None else None)


_WATCHDOG = _Watchdog()
