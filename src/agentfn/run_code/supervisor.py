"""The supervisor: it runs a backend's isolating command under the limits, reads its output up to the caps,
kills it at the deadline, on a flood or when the run's bound says it is over, and says which limit was hit.

Nothing of the service reaches the program: no environment, no open files but the program's own pipes, and
(when the service runs as root) an unprivileged host uid of the run's own.
"""

from __future__ import annotations

import os
import select
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .bwrap_status import Status
from .limits import RunLimits, SandboxError

if TYPE_CHECKING:
    from .bounds import RunBound


@dataclass(frozen=True)
class Launch:
    """What a backend hands to `supervise`: the isolating command and the descriptors it reads."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()  # handed to the command; `supervise` closes them once it started
    rlimits: bool = True  # apply the limits with prlimit (bubblewrap); runsc applies them itself
    status_read: int | None = None  # read end of bwrap's --json-status-fd: a setup failure has no exit-code
    block_write: int | None = None  # write end of bwrap's --block-fd: the program starts once the run's bound holds


@dataclass(frozen=True)
class Result:
    stdout: str
    stderr: str
    exit_status: int | None  # as a shell reports it: 128 + N when signal N ended it; None when we killed it
    signal: str | None
    wall_ms: int
    cpu_ms: int
    limit: str | None  # wall_time | cpu_time | memory | processes | file_size | open_files | output
    truncated: dict[str, bool]


def prlimit_prefix(limits: RunLimits, prlimit: str, *, nproc: bool) -> list[str]:
    """Soft and hard limits set before the sandbox starts, inherited by everything in it, never raised.

    CPU: soft = hard, so SIGKILL at the limit; the program is pid 1 of its namespace, which ignores SIGXCPU.
    The process limit only for a run with a host uid of its own: set before the run's user namespace exists,
    the kernel counts it against that uid, which would be the service's own (shared by every run) otherwise;
    `RunBound.enter` sets it inside the namespace instead."""
    return [
        prlimit,
        f"--as={limits.memory_bytes}",
        *([f"--nproc={limits.processes}"] if nproc else []),
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        f"--cpu={limits.cpu_seconds}",
        "--core=0",
        "--",
    ]


def find_prlimit(configured: str | None) -> str:
    return configured or shutil.which("prlimit") or "/usr/bin/prlimit"


def supervise(launch: Launch, limits: RunLimits, *, prlimit: str, uid: int | None, bound: RunBound | None = None) -> Result:
    """Run the launch under the limits and the run's bound; collect capped output; kill at the deadline, on a
    flood, or when the bound says the run is over it."""
    argv = (prlimit_prefix(limits, prlimit, nproc=uid is not None) if launch.rlimits else []) + launch.argv
    ids = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
    status = Status(launch.status_read)
    started = time.monotonic()
    deadline = started + limits.wall_seconds
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            pass_fds=launch.pass_fds,
            start_new_session=True,
            close_fds=True,
            **ids,
        )
    except OSError as e:
        _close(launch.pass_fds)
        _close([launch.block_write] if launch.block_write is not None else [])
        status.close()
        if bound is not None:
            bound.close()
        raise SandboxError(f"cannot start {os.path.basename(argv[0])}: {e.strerror}") from None
    _close(launch.pass_fds)
    out = {"stdout": bytearray(), "stderr": bytearray()}
    truncated = {"stdout": False, "stderr": False}
    killed_for, exited = None, False
    pidfd = os.pidfd_open(proc.pid)
    try:
        # The tree the bound watches: from the sandbox's first process, or the whole command (runsc's kernel)
        watched = proc.pid
        if launch.block_write is not None:
            watched = _start(launch.block_write, status, bound, deadline, nproc=uid is None)
        watch = bound.poll if bound is not None and watched is not None else None
        checked = 0.0
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
            sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
            sel.register(pidfd, selectors.EVENT_READ, "exit")
            streams = 2
            while streams or not exited:
                left = deadline - time.monotonic()
                if left <= 0:
                    killed_for = "wall_time"
                    break
                if watch and not exited and time.monotonic() - checked >= watch:
                    checked = time.monotonic()
                    killed_for = bound.check(watched)
                    if killed_for:
                        break
                for key, _ in sel.select(min(left, watch) if watch else left):
                    if key.data == "exit":
                        exited = True
                        sel.unregister(pidfd)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        streams -= 1
                        continue
                    kept = out[key.data]
                    room = limits.output_bytes - len(kept)
                    kept += chunk[: max(room, 0)]
                    if len(chunk) > room:
                        truncated[key.data] = True
                        killed_for = "output"
                if killed_for:
                    break
    finally:
        if killed_for or not exited:
            _kill(proc, pidfd, status)
        os.close(pidfd)
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        proc.stdout.close()
        proc.stderr.close()
        report = status.rest()
        kernel_stopped = bound.limit() if bound is not None else None
        if bound is not None:
            bound.close()
    if launch.status_read is not None and not killed_for and b'"exit-code"' not in report:
        # bwrap failed before the program ran: its own message (never the program's) says why.
        first = bytes(out["stderr"]).decode("utf-8", "replace").strip().splitlines()[:1]
        raise SandboxError(f"the sandbox did not start: {first[0][:200] if first else 'no reason given'}")
    wall_ms = round((time.monotonic() - started) * 1000)
    cpu_ms = round((usage.ru_utime + usage.ru_stime) * 1000)
    code = proc.returncode
    if killed_for:
        exit_status, sig = None, "SIGKILL"
    elif code < 0:
        exit_status, sig = 128 - code, _signal_name(-code)
    else:
        exit_status, sig = code, _signal_name(code - 128) if code > 128 else None
    stderr = out["stderr"].decode("utf-8", "replace")
    return Result(
        stdout=out["stdout"].decode("utf-8", "replace"),
        stderr=stderr,
        exit_status=exit_status,
        signal=sig,
        wall_ms=wall_ms,
        cpu_ms=cpu_ms,
        limit=killed_for or kernel_stopped or classify(exit_status, cpu_ms, stderr, limits),
        truncated=truncated,
    )


def _start(block_write: int, status: Status, bound: RunBound | None, deadline: float, *, nproc: bool) -> int | None:
    """Put the run under its bound while bwrap's first process inside waits on --block-fd, then let it start.
    None when bwrap never got that far (it says why on stderr)."""
    try:
        first = status.wait_child_pid(deadline)
        if first is not None and bound is not None:
            bound.enter(first, nproc=nproc)
    except ProcessLookupError:
        first = None  # bwrap ended meanwhile
    except OSError as e:
        os.close(block_write)  # bwrap goes on at EOF: the caller kills it before it gets far
        raise SandboxError(f"the run's bound cannot be set: {e.strerror}") from None
    try:
        os.write(block_write, b"go")
    except OSError:
        pass  # bwrap already gone
    os.close(block_write)
    return first


def _kill(proc: subprocess.Popen, pidfd: int, status: Status) -> None:
    """Kill the sandbox's pid 1 (the program) first: the kernel then kills every other process of its pid
    namespace, and bwrap reaps it, so the run's CPU time is counted; then the host-side session, always."""
    init = status.child_pid()
    if init is not None:
        try:
            init_fd = os.pidfd_open(init)
            try:
                if _parent(init) == proc.pid:  # still bwrap's child, so the pid names the program
                    signal.pidfd_send_signal(init_fd, signal.SIGKILL)
                    select.select([pidfd], [], [], 2.0)
            finally:
                os.close(init_fd)
        except OSError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def classify(exit_status: int | None, cpu_ms: int, stderr: str, limits: RunLimits) -> str | None:
    """Which limit ended the run, from what the kernel and the interpreter say (the program may lie only
    about itself). The wall deadline and output flood are known for sure; they never reach here."""
    # cpu_ms is sampled and undercounts a busy machine's last tick or two, hence the margin below the limit.
    if exit_status in (128 + signal.SIGXCPU, 128 + signal.SIGKILL) and cpu_ms >= limits.cpu_seconds * 700:
        return "cpu_time"
    tail = stderr[-2000:]  # the interpreter's last words; several processes may have died at once
    if exit_status == 128 + signal.SIGXFSZ or "File too large" in tail:
        return "file_size"
    if exit_status == 0:
        return None
    if "MemoryError" in tail or "Cannot allocate memory" in tail:
        return "memory"
    if "Resource temporarily unavailable" in tail or "can't start new thread" in tail:
        return "processes"
    if "Too many open files" in tail:
        return "open_files"
    return None
