"""One sandbox interface, two backends: a program goes in, its bounded output and what stopped it come out.

A backend (`bubblewrap`, `runsc`) builds the command that isolates the program; `supervisor` runs that
command under the resource limits (`limits`) and says which limit was hit. What bounds the run as a whole
(its memory and processes, all children included) is `bounds`. Here: the interface, the host uids runs take
when the service is root, and the canary run that tells readiness whether the sandbox works on this host.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Protocol

from .limits import SandboxError
from .supervisor import Result

if TYPE_CHECKING:
    from .rootfs import LazyRoot

log = logging.getLogger("agentfn.run_code.sandbox")


class Sandbox(Protocol):
    name: str
    root: LazyRoot

    def run(self, program: str) -> Result: ...

    def ready(self) -> bool: ...


class Uids:
    """Host uids for runs when the service is root: one per concurrent run, so RLIMIT_NPROC is per run.

    The kernel does not enforce the process limit for uid 0 and counts it per uid, so a shared uid would
    let one run's fork bomb starve another. Replicas of the function draw from offset ranges by pid.
    """

    def __init__(self, base: int, slots: int):
        self._free = list(range(slots))
        self._lock = threading.Condition()
        self._base = base + (os.getpid() % 1000) * slots

    def acquire(self, timeout: float) -> int:
        with self._lock:
            if not self._lock.wait_for(lambda: self._free, timeout):
                raise SandboxError("every sandbox slot is busy")
            return self._base + self._free.pop()

    def release(self, uid: int) -> None:
        with self._lock:
            self._free.append(uid - self._base)
            self._lock.notify()


class SelfTest:
    """One canary run right after start, beside the way to ready: it discovers the root, and a sandbox that
    cannot start on this host (no user namespaces, a missing library) makes /readyz false instead of
    failing every call."""

    CANARY = "print('ok')"

    def __init__(self, sandbox: Sandbox):
        self.sandbox, self.failed = sandbox, None

    def start(self) -> None:
        threading.Thread(target=self._run, name="sandbox-self-test", daemon=True).start()

    def _run(self) -> None:
        try:
            result = self.sandbox.run(self.CANARY)
            if result.stdout != "ok\n":
                self.failed = f"the canary run printed no ok (exit {result.exit_status}, limit {result.limit})"
        except Exception as e:  # noqa: BLE001 - whatever it is, the sandbox is not usable
            self.failed = f"{type(e).__name__}: {e}"[:200]
        if self.failed:
            log.error("sandbox self-test failed", extra={"event": "sandbox_self_test", "where": self.failed})

    def ok(self) -> bool:
        return self.failed is None
