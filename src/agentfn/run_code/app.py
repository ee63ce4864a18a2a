"""run_code: a Python 3 program in a sandbox, counted against the caller's daily runs.

`gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.run_code.app:create_app()'`. The program sees no
network but its own `lo`, no file of the host but the interpreter's, no environment, no token; it gets a
scratch tmpfs and hard limits, and its output comes back capped.

Configuration: `RunCodeSettings` and `SandboxSettings` (agentfn.run_code.settings; docs/configuration.md), and
identity's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from flask import Flask

from agentfn.shared import app as http
from agentfn.shared import clock, telemetry
from agentfn.shared.contract import audience
from agentfn.shared.identity import Caller, Identity
from agentfn.shared.problems import ProblemError, problem_type, unavailable
from agentfn.shared.pseudonym import subject_hash
from agentfn.shared.tool_function import doors, load_descriptor, openapi

from .bounds import Bounds
from .bubblewrap import Bubblewrap
from .limits import SandboxError
from .rootfs import LazyRoot, default_python
from .sandbox import Sandbox, SelfTest, Uids
from .settings import RunCodeSettings, SandboxSettings
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
            type=problem_type("daily-runs-spent"),
            limit=limit,
            resets_at=resets_at,
        )
        self.retry_after = retry_after


def open_sandbox(settings: SandboxSettings) -> Sandbox:
    backend, mode, limits = settings.backend, settings.cgroup, settings.limits()
    root = LazyRoot(settings.python or default_python())
    uids = Uids(settings.uid_base, settings.concurrency) if os.geteuid() == 0 else None
    if backend == "runsc" and mode == "required":
        raise RuntimeError("AGENTFN_RUN_CODE_CGROUP=required: the runsc backend has no cgroup per run")
    bounds = Bounds("off" if backend == "runsc" else mode, limits)
    # Which mechanism holds a run, and why: an operator reads it here, a caller in each call's `bounds`.
    runs_as = "uids of their own" if uids else "the service uid"
    log.info(
        "run bounds", extra={"event": "run_bounds", "where": f"{backend}: {bounds.name} ({bounds.why}); runs as {runs_as}"}
    )
    if backend == "bubblewrap":
        return Bubblewrap(settings, limits, root, uids, bounds)
    from .runsc import Runsc

    return Runsc(settings, limits, root, uids, bounds)


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    settings = RunCodeSettings.from_env(env)
    daily = settings.daily_runs
    sandbox = open_sandbox(SandboxSettings.from_env(env))
    self_test = SelfTest(sandbox)
    store = Store(settings.database_url, pool_size=settings.db_pool_size)
    descriptor = load_descriptor("agentfn.run_code")

    app = http.create_app(
        "agentfn.run_code",
        openapi=openapi(descriptor, CONTENT, call_problems=(429, 503)),
        database=store,
        readiness={"sandbox": lambda: sandbox.ready() and self_test.ok()},
        identity=Identity.from_env(env, gateway=False, audience=audience("tool", "run_code")),
        max_request_bytes=settings.max_request_bytes,
    )

    def run(caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
        """One of the caller's runs: taken first (atomically), given back only if the sandbox never started."""
        taken = store.take(caller.subject, daily)
        if not taken.ok:
            telemetry.record("agentfn.budget.refusals", 1, {"agentfn.limit": "daily-runs"})
            raise RunsSpent(daily, clock.timestamp(taken.resets_at), retry_after=clock.seconds_until(taken.resets_at))
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

    app.register_blueprint(doors(descriptor, run))
    self_test.start()  # ~0.3 s of ldd and one run, beside the way to ready rather than on it
    return app
