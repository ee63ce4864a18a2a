"""What a run may use (`RunLimits`, from the sandbox settings), and the error of a sandbox that could not start.

Every part of the function reads these: the sandbox backends, the run's bound (`bounds`) and its root (`rootfs`).
"""

from __future__ import annotations

from dataclasses import dataclass

MB = 1024 * 1024


class SandboxError(Exception):
    """The sandbox could not start: not the program's fault, and not counted against the caller."""


@dataclass(frozen=True)
class RunLimits:
    """What one sandboxed run may use."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 5
    memory_bytes: int = 256 * MB  # memory of the run (all its processes), and address space of each process
    processes: int = 16  # processes and threads of the run
    file_bytes: int = 8 * MB  # the largest file it may write
    open_files: int = 64
    output_bytes: int = 64 * 1024  # kept of stdout, and of stderr; more ends the run
    tmpfs_bytes: int = 16 * MB  # its scratch space
