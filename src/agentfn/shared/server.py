"""What every function's server reads: where it listens, its gunicorn workers, and how much it logs."""

from __future__ import annotations

from dataclasses import dataclass

from .settings import Settings, setting


@dataclass(frozen=True)
class ServerSettings(Settings):
    port: int = setting("PORT", 8080, "the port a function listens on", minimum=1, maximum=65535)
    function: str | None = setting(
        "AGENTFN_FUNCTION",
        None,
        "the function gunicorn serves when no app is named: `agentfn.<function>.app:create_app()`",
        shown="(none; each image sets its own)",
    )
    bind: str = setting("AGENTFN_BIND", "0.0.0.0", "the address it binds")
    workers: int = setting("AGENTFN_WORKERS", 1, "gunicorn gthread workers", minimum=1)
    threads: int = setting("AGENTFN_THREADS", 4, "threads of each worker", minimum=1)
    worker_timeout: int = setting(
        "AGENTFN_WORKER_TIMEOUT", 120, "seconds before gunicorn restarts a stuck worker", minimum=1
    )
    log_level: str = setting(
        "AGENTFN_LOG_LEVEL",
        "INFO",
        "JSON logs on stderr; never tokens or entry text",
        parse=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    )
