"""The runsc backend: the program in gVisor, a user-space kernel, where runsc is installed.

Each run is an OCI bundle in memory (/dev/shm): a read-only root of empty mount points, the same read-only
binds of the interpreter as bubblewrap's, a size-capped tmpfs for work, a /proc of gVisor's own, no network
(`--network=none`: not even the host's loopback), the limits as the process's rlimits, no capabilities.
The run's bound: gVisor is a kernel of the run's own, so the process limit it enforces counts this run only;
the memory of the whole tree of runsc (the run's pages and gVisor's own) is sampled (`bounds.Sampled`).
runsc needs root (or its rootless mode); the cluster uses gVisor as a RuntimeClass instead.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import uuid

from .bounds import Bounds
from .limits import RunLimits, SandboxError
from .rootfs import LazyRoot, Root
from .sandbox import Uids
from .settings import SandboxSettings
from .supervisor import Launch, Result, supervise

PROGRAM = "/program/main.py"
WORK = "/tmp"


def find_runsc(configured: str | None) -> str | None:
    return configured or shutil.which("runsc")


class Runsc:
    name = "runsc"

    def __init__(self, settings: SandboxSettings, limits: RunLimits, root: LazyRoot, uids: Uids | None, bounds: Bounds):
        self.runsc = find_runsc(settings.runsc)
        if not self.runsc:
            raise RuntimeError("AGENTFN_RUN_CODE_BACKEND=runsc, but runsc is not installed")
        self.platform = settings.runsc_platform
        self.limits, self.root, self.bounds = limits, root, bounds
        self.state = tempfile.mkdtemp(prefix="agentfn-runsc-state-")
        atexit.register(shutil.rmtree, self.state, True)
        self.scratch = "/dev/shm" if os.path.isdir("/dev/shm") else None  # bundles hold the program: memory only

    def ready(self) -> bool:
        return os.access(self.runsc, os.X_OK) and os.geteuid() == 0

    def run(self, program: str) -> Result:
        bundle = tempfile.mkdtemp(prefix="agentfn-run-", dir=self.scratch)
        container = f"run-{uuid.uuid4().hex[:16]}"
        killed = True
        try:
            write_bundle(bundle, self.root.get(), self.limits, program)
            argv = [
                self.runsc,
                "--root",
                self.state,
                "--network=none",
                f"--platform={self.platform}",
                "run",
                "--bundle",
                bundle,
                container,
            ]
            result = supervise(Launch(argv, rlimits=False), self.limits, prlimit="", uid=None, bound=self.bounds.for_run())
            killed = result.exit_status is None
            return result
        finally:
            if killed:  # `runsc run` cleans up after itself, unless it was killed
                subprocess.run(
                    [self.runsc, "--root", self.state, "delete", "--force", container],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={},
                    timeout=10,
                    check=False,
                )
            shutil.rmtree(bundle, ignore_errors=True)


def write_bundle(bundle: str, root: Root, limits: RunLimits, program: str) -> None:
    rootfs = os.path.join(bundle, "rootfs")
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["mode=0755", "size=64k", "ro"]},
        {
            "destination": WORK,
            "type": "tmpfs",
            "source": "tmpfs",
            "options": [f"size={limits.tmpfs_bytes}", "mode=0700", "uid=1000", "gid=1000"],
        },
    ]
    for source, target in root.binds:
        _mount_point(rootfs + target, directory=os.path.isdir(source))
        mounts.append({"destination": target, "type": "bind", "source": source, "options": ["rbind", "ro"]})
    for hidden in root.hidden:
        mounts.append({"destination": hidden, "type": "tmpfs", "source": "tmpfs", "options": ["size=4k", "ro"]})
    for point in ("/proc", "/dev", WORK):
        _mount_point(rootfs + point, directory=True)
    _mount_point(rootfs + PROGRAM, directory=False)
    with open(rootfs + PROGRAM, "wb") as f:
        f.write(program.encode("utf-8", "surrogatepass"))
    os.chmod(rootfs + PROGRAM, 0o444)

    def rlimit(kind: str, soft: int, hard: int | None = None) -> dict:
        return {"type": kind, "soft": soft, "hard": soft if hard is None else hard}

    config = {
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 1000, "gid": 1000},
            "args": [root.python, "-I", "-B", PROGRAM],
            "env": [f"PATH={os.path.dirname(root.python)}", f"HOME={WORK}", "LANG=C.UTF-8"],
            "cwd": WORK,
            "noNewPrivileges": True,
            "capabilities": {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")},
            "rlimits": [
                rlimit("RLIMIT_AS", limits.memory_bytes),
                rlimit("RLIMIT_NPROC", limits.processes),
                rlimit("RLIMIT_FSIZE", limits.file_bytes),
                rlimit("RLIMIT_NOFILE", limits.open_files),
                rlimit("RLIMIT_CPU", limits.cpu_seconds),
                rlimit("RLIMIT_CORE", 0),
            ],
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
    }
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f)


def _mount_point(path: str, *, directory: bool) -> None:
    if directory:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()


__all__ = ["Runsc", "SandboxError", "find_runsc"]
