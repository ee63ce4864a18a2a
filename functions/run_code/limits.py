"""What a run may use (`Limits`, from `AGENTFN_RUN_CODE_*`), and the error of a sandbox that could not start.

Every part of the function reads these: the sandbox backends, the run's bound (`bounds`) and its root (`rootfs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MB = 1024 * 1024


class SandboxError(Exception):
    """The sandbox could not start: not the program's fault, and not counted against the caller."""


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 5
    memory_bytes: int = 256 * MB  # memory of the run (all its processes), and address space of each process
    processes: int = 16  # processes and threads of the run
    file_bytes: int = 8 * MB  # the largest file it may write
    open_files: int = 64
    output_bytes: int = 64 * 1024  # kept of stdout, and of stderr; more ends the run
    tmpfs_bytes: int = 16 * MB  # its scratch space

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        def number(name: str, default: float) -> float:
            value = float(env.get(f"AGENTFN_RUN_CODE_{name}", default))
            if value <= 0:
                raise RuntimeError(f"AGENTFN_RUN_CODE_{name} must be positive")
            return value

        d = cls()
        return cls(
            wall_seconds=number("WALL_SECONDS", d.wall_seconds),
            cpu_seconds=int(number("CPU_SECONDS", d.cpu_seconds)),
            memory_bytes=int(number("MEMORY_MB", d.memory_bytes / MB) * MB),
            processes=int(number("PROCESSES", d.processes)),
            file_bytes=int(number("FILE_MB", d.file_bytes / MB) * MB),
            open_files=int(number("OPEN_FILES", d.open_files)),
            output_bytes=int(number("OUTPUT_BYTES", d.output_bytes)),
            tmpfs_bytes=int(number("TMPFS_MB", d.tmpfs_bytes / MB) * MB),
        )
