"""What bounds a run as a whole, not only each of its processes: chosen once per service process at start.

- `cgroup`: a cgroup v2 of the run's own under the service's delegated subtree: `memory.max` (no swap, and the
  whole run killed together when it is reached), `pids.max`, and `cpu.max` of one CPU where the cpu controller
  is delegated. The kernel counts every page and process of the run, children included.
- `rlimit` (no writable cgroup v2 with the memory and pids controllers, as in most pods): the process limit is
  set on the run's first process after its user namespace exists, so the kernel counts it in that namespace,
  that is per run, whatever host uid the service has; and the run's resident memory (anonymous and shared, of
  all its processes) is sampled every `POLL_SECONDS`, the run killed once it is over the bound.

In both, each process keeps its own rlimits (address space, CPU time, file size, open files), and the run its
wall deadline and output caps (`supervisor.supervise`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import time

from .limits import RunLimits, SandboxError

MODES = ("auto", "required", "off")
NEEDED = ("memory", "pids")
POLL_SECONDS = 0.02  # the rlimit mechanism's memory sample: ~0.75 ms of CPU for a 16-process run, so <4% of a core


class Unavailable(Exception):
    """No cgroup v2 subtree this process may use for runs; says why."""


class Bounds:
    """The mechanism in force for every run of this service process."""

    def __init__(self, mode: str, limits: RunLimits):
        if mode not in MODES:
            raise RuntimeError(f"AGENTFN_RUN_CODE_CGROUP must be one of {', '.join(MODES)}")
        self.limits, self.tree, self.why = limits, None, "no cgroup tried"
        if mode != "off":
            try:
                self.tree = Tree.open()
                self.why = f"a cgroup per run under {self.tree.path}"
            except Unavailable as e:
                if mode == "required":
                    raise RuntimeError(f"AGENTFN_RUN_CODE_CGROUP=required, but {e}") from None
                self.why = str(e)
        self.name = "cgroup" if self.tree else "rlimit"

    def for_run(self) -> RunBound:
        if not self.tree:
            return Sampled(self.limits)
        try:
            return CgroupRun(self.tree, self.limits)
        except OSError as e:
            raise SandboxError(f"the run's cgroup cannot be made: {e.strerror}") from None


class RunBound:
    """One run's bound: `enter` before its program starts, `check` while it runs, `limit` and `close` after."""

    poll: float | None = None

    def __init__(self, limits: RunLimits):
        self.limits = limits

    def enter(self, pid: int, *, nproc: bool) -> None:
        """`pid`: the run's first process inside its user namespace, still waiting to start the program.
        `nproc`: the run shares its host uid with the service (so the limit was not set before): set it now,
        counted in the run's own namespace. Allowed without privilege: the process has the service's uid."""
        if nproc:
            resource.prlimit(pid, resource.RLIMIT_NPROC, (self.limits.processes, self.limits.processes))

    def check(self, pid: int) -> str | None:
        return None

    def limit(self) -> str | None:
        return None

    def close(self) -> None:
        pass


class Sampled(RunBound):
    poll = POLL_SECONDS

    def check(self, pid: int) -> str | None:
        return "memory" if resident(pid) > self.limits.memory_bytes else None


def resident(pid: int) -> int:
    """Anonymous and shared resident bytes of `pid` and every descendant (a pid namespace's orphans are
    re-parented to its init, so the tree from the run's first process holds all of them). Pages shared after
    a fork count once per process: the sum errs high, never low."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status", "rb") as f:
                for line in f:
                    if line.startswith((b"RssAnon:", b"RssShmem:")):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue  # it ended between two reads
    return total


class Tree:
    """The service's own cgroup v2, made a parent of runs: its processes moved to a `service` leaf (a cgroup
    with processes may not hand controllers to children), memory and pids (and cpu) enabled for children."""

    _seq = itertools.count()

    def __init__(self, path: str, cpu: bool):
        self.path, self.cpu = path, cpu

    @classmethod
    def open(cls) -> Tree:
        mount = cgroup2_mount()
        own = own_cgroup()
        path = os.path.normpath(mount + own)
        if not os.path.isdir(path):
            raise Unavailable(f"this process's cgroup {own} is not under {mount} (another cgroup namespace)")
        offered = read(f"{path}/cgroup.controllers").split()
        missing = [c for c in NEEDED if c not in offered]
        if missing:
            raise Unavailable(
                f"the cgroup v2 controllers {', '.join(missing)} are not delegated to {path} "
                f"(it offers: {' '.join(offered) or 'none'})"
            )
        if not (os.access(path, os.W_OK) and os.access(f"{path}/cgroup.subtree_control", os.W_OK)):
            raise Unavailable(f"{path} is not writable by uid {os.geteuid()} (not delegated, or mounted read-only)")
        wanted = [*NEEDED, *(["cpu"] if "cpu" in offered else [])]
        enabled = read(f"{path}/cgroup.subtree_control").split()
        try:
            if any(c not in enabled for c in wanted):
                if os.path.exists(f"{path}/cgroup.type"):  # not the hierarchy's root, which may keep its processes
                    leave(path, f"{path}/service")
                write(f"{path}/cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        except OSError as e:
            raise Unavailable(f"cannot delegate {' '.join(wanted)} to runs under {path}: {e.strerror}") from None
        return cls(path, "cpu" in wanted)

    def new_run(self) -> str:
        path = f"{self.path}/run-{os.getpid()}-{next(self._seq)}"
        os.mkdir(path, 0o755)
        return path


class CgroupRun(RunBound):
    def __init__(self, tree: Tree, limits: RunLimits):
        super().__init__(limits)
        self.path = tree.new_run()
        try:
            write(f"{self.path}/memory.max", str(limits.memory_bytes))
            if os.path.exists(f"{self.path}/memory.swap.max"):
                write(f"{self.path}/memory.swap.max", "0")
            write(f"{self.path}/memory.oom.group", "1")  # the run stops as one, not a process at random
            write(f"{self.path}/pids.max", str(limits.processes))
            if tree.cpu:
                write(f"{self.path}/cpu.max", "100000 100000")  # one CPU, whatever the run forks
        except BaseException:
            self.close()
            raise

    def enter(self, pid: int, *, nproc: bool) -> None:
        write(f"{self.path}/cgroup.procs", str(pid))
        super().enter(pid, nproc=nproc)  # the per-namespace count too: a second fence

    def limit(self) -> str | None:
        if counter(f"{self.path}/memory.events", "oom_kill"):
            return "memory"
        if counter(f"{self.path}/pids.events", "max"):
            return "processes"
        return None

    def close(self) -> None:
        """Kill whatever is left of the run (a process that left the sandbox's session), then remove it."""
        with contextlib.suppress(OSError):
            write(f"{self.path}/cgroup.kill", "1")
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)  # still populated for a moment after the kill


def cgroup2_mount() -> str:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup2":
                return fields[4]
    raise Unavailable("no cgroup v2 hierarchy is mounted")


def own_cgroup() -> str:
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    raise Unavailable("this process is in no cgroup v2")


def leave(path: str, leaf: str) -> None:
    """Move every process of `path` into `leaf` (gunicorn's master and its workers alike)."""
    os.makedirs(leaf, exist_ok=True)
    for _ in range(3):  # a process forked meanwhile is born in `path`: take it on the next round
        pids = read(f"{path}/cgroup.procs").split()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                write(f"{leaf}/cgroup.procs", pid)


def counter(path: str, key: str) -> int:
    with contextlib.suppress(OSError):
        for line in read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)
