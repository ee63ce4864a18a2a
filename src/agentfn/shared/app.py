"""The HTTP skeleton every agentfn function is built on.

`create_app` gives a Flask app with: problem-details errors (RFC 9457), a request-size cap, a request id
on every request and response, one JSON log line per request, `/healthz` (alive), `/readyz` (every
dependency answers) and the function's OpenAPI document at `/openapi.json`. A function with a database
hands its store over: the store's migrations and ping become the `database` readiness check, and an
outage a 503 problem. The function adds its doors as a blueprint.

A part is scale-to-zero: start-to-ready is what a caller waits for. What only a request needs (PyJWT for its
token, a compiled request schema) stays off the way to ready and is warmed up (`warm_up`) in the background once
/readyz first answers ready, so the first request rarely pays for it either.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

from . import logs, pseudonym, telemetry
from .identity import Identity
from .problems import PROBLEM_JSON, ProblemError, unavailable
from .pseudonym import subject_hash
from .server import ServerSettings


class Database(Protocol):
    """A function's store, as the app factory needs it (`db.SchemaStore` is one)."""

    outages: tuple[type[Exception], ...]  # what its driver raises when the database is not answering

    def ready(self) -> bool: ...


log = logging.getLogger("agentfn.http")

REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
DEFAULT_MAX_BYTES = 64 * 1024
WARM_UP = "agentfn.warm_up"


class WarmUp:
    """Steps run once, in one background thread, after /readyz first answered ready (the answer sent)."""

    def __init__(self) -> None:
        self.steps: list[Callable[[], object]] = []
        self._started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._started or not self.steps:
                return
            self._started = True
        threading.Thread(target=self._run, name="agentfn-warm-up", daemon=True).start()

    def _run(self) -> None:
        for step in self.steps:
            try:
                step()
            except Exception as error:  # noqa: BLE001 - the request that needs it will meet (and report) it
                log.warning("warm-up step failed", extra={"event": "warm_up", "error_type": type(error).__name__})


def warm_up(app: Flask, step: Callable[[], object]) -> None:
    """Run `step` after the app first answers ready, beside the first requests rather than before ready."""
    app.extensions.setdefault(WARM_UP, WarmUp()).steps.append(step)


def problem_response(problem: ProblemError) -> Response:
    body = problem.to_dict()
    if getattr(g, "request_id", None):
        body["request_id"] = g.request_id
    response = jsonify(body)
    response.status_code = problem.status
    response.mimetype = PROBLEM_JSON
    if problem.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="agentfn"'
    return response


# The methods named as sent (RFC 9110's and PATCH, the HTTP conventions' default list); any other is `_OTHER`, so
# that a caller cannot write a word of their choosing into span names, traces or logs through the request line.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})


def method_of(method: str) -> str:
    return method if method in KNOWN_METHODS else "_OTHER"


DRAIN_BYTES = 1024 * 1024


def _drain(environ) -> None:
    """Read (and drop) a refused body up to a bound, so the client hears the 413 instead of a reset."""
    stream, left = environ.get("wsgi.input"), min(int(environ.get("CONTENT_LENGTH") or 0), DRAIN_BYTES)
    while stream is not None and left > 0:
        chunk = stream.read(min(left, 65536))
        if not chunk:
            break
        left -= len(chunk)


def create_app(
    name: str,
    *,
    openapi: Mapping[str, Any],
    readiness: Mapping[str, Callable[[], bool]],
    identity: Identity | None,
    max_request_bytes: int = DEFAULT_MAX_BYTES,
    database: Database | None = None,
    liveness: Mapping[str, Callable[[], bool]] | None = None,
) -> Flask:
    # Flask looks for an instance folder by package; agentfn's packages are mapped folders, and we use none.
    app = Flask(name, instance_path=os.path.join(os.path.dirname(__file__), "instance"))
    app.config["MAX_CONTENT_LENGTH"] = max_request_bytes
    app.json.sort_keys = False
    app.extensions[WARM_UP] = WarmUp()
    if identity is not None:
        app.extensions["agentfn.identity"] = identity
        pseudonym.use(identity.subject_key)
        warm_up(app, identity.warm)
    if telemetry.setup(name.removeprefix("agentfn.")):
        _trace_requests(app)

    @app.before_request
    def start():
        given = request.headers.get("X-Request-Id", "")
        g.request_id = given if REQUEST_ID.match(given) else uuid.uuid4().hex
        g.started = time.perf_counter()

    @app.after_request
    def finish(response: Response) -> Response:
        response.headers["X-Request-Id"] = g.get("request_id", "")
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers["X-Content-Type-Options"] = "nosniff"
        caller = g.get("caller")
        log.info(
            "request",
            extra={
                "request_id": g.get("request_id"),
                "method": method_of(request.method),
                "route": request.url_rule.rule if request.url_rule else None,
                "status": response.status_code,
                "ms": round((time.perf_counter() - g.get("started", time.perf_counter())) * 1000, 2),
                "subject_hash": subject_hash(caller.subject) if caller else None,
            },
        )
        return response

    @app.errorhandler(ProblemError)
    def on_problem(problem: ProblemError):
        return problem_response(problem)

    @app.errorhandler(HTTPException)
    def on_http(error: HTTPException):
        if error.code == 413:
            _drain(request.environ)
        detail = {
            404: "no such door",
            405: f"{request.method} is not allowed here",
            413: f"the body is larger than {max_request_bytes} bytes",
        }.get(error.code or 500, error.description or "")
        response = problem_response(ProblemError(error.code or 500, error.name, detail))
        if getattr(error, "valid_methods", None):
            response.headers["Allow"] = ", ".join(error.valid_methods)
        return response

    @app.errorhandler(Exception)
    def on_crash(error: Exception):
        # The message of an arbitrary exception may quote data; log where it happened, not what it said.
        frames = traceback.extract_tb(error.__traceback__)[-3:]
        where = " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in reversed(frames))
        log.error("unhandled", extra={"request_id": g.get("request_id"), "error_type": type(error).__name__, "where": where})
        return problem_response(ProblemError(500, "Internal Server Error", "the request failed; see request_id"))

    if database is not None:
        readiness = {"database": database.ready, **readiness}
        part = name.removeprefix("agentfn.")

        def database_down(_error):
            # Nothing was written: the statement's transaction never committed. The pool reconnects by itself.
            return problem_response(unavailable(f"the {part} database is not answering; try again shortly"))

        for outage in database.outages:
            app.register_error_handler(outage, database_down)

    @app.get("/healthz")
    def healthz():
        """Alive: the process answers, and nothing it cannot recover from without a restart has failed
        (`liveness`: e.g. a model that did not load); a 503 here has the pod restarted."""
        checks = {check_name: bool(check()) for check_name, check in (liveness or {}).items()}
        if all(checks.values()):
            return jsonify(status="ok")
        return jsonify(status="failing", checks=checks), 503

    @app.get("/readyz")
    def readyz():
        """Ready: every dependency answers."""
        checks = {}
        for check_name, check in readiness.items():
            try:
                checks[check_name] = bool(check())
            except Exception:
                checks[check_name] = False
        ready = all(checks.values())
        response = jsonify(ready=ready, checks=checks)
        if ready:
            response.call_on_close(app.extensions[WARM_UP].start)
        return response, 200 if ready else 503

    @app.get("/openapi.json")
    def openapi_document():
        """This function's doors as OpenAPI 3.1."""
        return jsonify(openapi)

    return app


def _trace_requests(app: Flask) -> None:
    """A server span per request, a child of the caller's `traceparent`: the method and the route's pattern (never
    the path, which may carry an id or a query), the status and the caller's `subject_hash`. A method outside the
    known ones is `_OTHER`, and its span is named `HTTP` (the HTTP conventions' names); its original is not kept."""

    @app.before_request
    def open_span():
        route = request.url_rule.rule if request.url_rule else None
        method = method_of(request.method)
        named = "HTTP" if method == "_OTHER" else method
        span = telemetry.start(
            f"{named} {route}" if route else named,
            {"http.request.method": method, "http.route": route},
            kind="server",
            parent=telemetry.extract(request.headers),
        )
        g.telemetry_span, g.telemetry_token = span, telemetry.attach(span)

    @app.after_request
    def close_span(response: Response) -> Response:
        span = g.pop("telemetry_span", None)
        if span is not None:
            caller = g.get("caller")
            span.attrs(
                {
                    "http.response.status_code": response.status_code,
                    "user.hash": subject_hash(caller.subject) if caller else None,
                }
            )
            if response.status_code >= 500:
                span.fail(str(response.status_code))
            # A streamed answer (a turn) is still being written: its span ends when the stream does.
            response.call_on_close(span.end)
        return response

    @app.teardown_request
    def leave_span(_error):
        telemetry.detach(g.pop("telemetry_token", None))


def configure_logging(env: Mapping[str, str]) -> None:
    logs.configure(ServerSettings.from_env(env).log_level)
