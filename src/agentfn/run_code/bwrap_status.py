"""bwrap's `--json-status-fd`, read without blocking: how the supervisor learns the sandbox's first process
(its pid 1) and whether the program ever ran."""

from __future__ import annotations

import os
import re
import select
import time


class Status:
    """bwrap's --json-status-fd: `child-pid` when the sandbox started, `exit-code` when its program ended."""

    CHILD_PID = re.compile(rb'"child-pid"\s*:\s*(\d+)')

    def __init__(self, fd: int | None):
        self.fd, self.data = fd, bytearray()
        if fd is not None:
            os.set_blocking(fd, False)

    def child_pid(self) -> int | None:
        self._read()
        match = self.CHILD_PID.search(self.data)
        return int(match.group(1)) if match else None

    def wait_child_pid(self, deadline: float) -> int | None:
        """The sandbox's first process, once bwrap made it; None if bwrap ended (or the deadline came) first."""
        while self.fd is not None:
            found = self.child_pid()
            if found is not None:
                return found
            ready, _, _ = select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.data += chunk
        return None

    def rest(self) -> bytes:
        """Everything written, once the sandbox is gone (every writer has exited)."""
        if self.fd is not None:
            os.set_blocking(self.fd, True)
            self._read()
            self.close()
        return bytes(self.data)

    def _read(self) -> None:
        while self.fd is not None:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.data += chunk

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
