"""What every tool function shares: its descriptor, its two doors, and the call to the platform service behind it.

A tool's descriptor is `functions/<tool>/tool.json`, the one source for `GET /v1/tool`, for the argument
check of `POST /v1/call`, and for whoever else lists tools (the model function, the operator, the chart).
A read tool runs as the caller: its doors take only tokens the model function exchanged for this tool
(`identity`), and it exchanges that token again for the audience of the platform service behind it
(`AGENTFN_<TOOL>_UPSTREAM_AUDIENCE`, default `agentfn:upstream:<tool>`; `exchange`), so the service never
receives a token another part would take. The service decides what the caller may see; its refusals and
failures become problems here.

Start-up stays light (tools are scale-to-zero, so a cold start is paid on a user's turn): jsonschema is
imported and the schema compiled on the first call, never on the way to ready; the upstream is called with
the standard library's http.client, which the app has loaded already, rather than another HTTP stack.

The bottom of this file is the common part of the dev upstreams: test doubles of the platform services
(which are outside this project) for the dev stack and the tests.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

from flask import Blueprint, Flask, g, jsonify, request

from . import openapi as spec
from . import telemetry
from .app import create_app
from .exchange import ExchangeFailed, TokenExchange
from .identity import Caller, Identity, bearer_token, caller_required, verify_caller
from .problems import ProblemError, forbidden, problem_type
from .tool_settings import DevUpstreamSettings, ReadToolSettings

DESCRIPTOR_FILE = "tool.json"
DESCRIPTOR_KEYS = {"name": str, "description": str, "input_schema": dict, "callable_alone": bool, "mcp": bool}
# Optional: whether a call changes state or spends the person's quota (then the person approves it, unless
# a grant waives that). A descriptor without it is taken to change state: an older tool is not trusted to be a read.
OPTIONAL_KEYS = {"changes_state": bool}


# --- the descriptor ------------------------------------------------------------------------------------


def load_descriptor(package: str) -> dict[str, Any]:
    """The tool's descriptor from `<package>/tool.json`, its shape checked (the schema itself on first call)."""
    descriptor = json.loads(resources.files(package).joinpath(DESCRIPTOR_FILE).read_text())
    return check_descriptor(descriptor)


def check_descriptor(descriptor: Any) -> dict[str, Any]:
    if not isinstance(descriptor, dict) or not set(DESCRIPTOR_KEYS) <= set(descriptor) <= set(DESCRIPTOR_KEYS) | set(
        OPTIONAL_KEYS
    ):
        raise ValueError(
            f"a tool descriptor has exactly the keys {sorted(DESCRIPTOR_KEYS)}, and may have {sorted(OPTIONAL_KEYS)}"
        )
    for key, kind in {**DESCRIPTOR_KEYS, **OPTIONAL_KEYS}.items():
        if key in descriptor and not isinstance(descriptor[key], kind):
            raise ValueError(f"the descriptor's {key} must be a {kind.__name__}")
    schema = descriptor["input_schema"]
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        raise ValueError("input_schema must be a strict object schema (additionalProperties: false)")
    return descriptor


def changes_state(descriptor: Mapping[str, Any]) -> bool:
    """Whether a call of the tool changes state (a descriptor that does not say is taken to)."""
    return descriptor.get("changes_state", True) is not False


def call_schema(descriptor: Mapping[str, Any]) -> dict[str, Any]:
    """The body of `POST /v1/call`: the arguments, checked against the tool's own input schema."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["arguments"],
        "properties": {"arguments": descriptor["input_schema"]},
    }


class LazySchema:
    """A `validation.Schema` compiled on first use: importing jsonschema costs a cold start ~0.1-0.2 s."""

    def __init__(self, schema: dict[str, Any]):
        self._raw, self._compiled, self._lock = schema, None, threading.Lock()

    def get(self):
        with self._lock:
            if self._compiled is None:
                from .validation import Schema

                self._compiled = Schema(self._raw)
            return self._compiled


# --- the doors -----------------------------------------------------------------------------------------

Call = Callable[[Caller, dict[str, Any]], Any]


def doors(descriptor: Mapping[str, Any], call: Call) -> Blueprint:
    """`GET /v1/tool` and `POST /v1/call` for one tool; `call` does the work as the caller."""
    bp = Blueprint("tool", __name__)
    body_schema = LazySchema(call_schema(descriptor))

    @bp.get("/v1/tool")
    @caller_required
    def describe():
        """The tool's descriptor."""
        return jsonify(descriptor)

    @bp.post("/v1/call")
    @caller_required
    def call_tool():
        """Call the tool with checked arguments, as the caller."""
        from .validation import json_body

        body = json_body(body_schema.get())
        name = descriptor["name"]
        with telemetry.span(
            f"execute_tool {name}",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.type": "function"},
        ) as span:
            try:
                content = call(g.caller, body["arguments"])
            except ProblemError as problem:
                span.fail(telemetry.error_type(problem.type, problem.status))
                raise
        return jsonify(content=content)

    return bp


FAILURES = {  # a door's problems by status
    400: "Bad request",
    401: "No valid caller token",
    403: "The platform service does not allow this caller",
    413: "Body too large",
    415: "Not JSON",
    422: "Invalid argument",
    429: "Daily runs spent",
    502: "The platform service failed or answered outside its contract",
    503: "A dependency is unavailable",
    504: "The platform service did not answer in time",
}


def openapi(
    descriptor: Mapping[str, Any], content_schema: dict[str, Any], *, call_problems: tuple[int, ...], version: str = "1.0.0"
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of a tool's two doors, from its descriptor and the shape of its content."""

    def problems(*codes: int) -> dict:
        return spec.problems(FAILURES, *codes)

    descriptor_schema = {
        "type": "object",
        "required": list(DESCRIPTOR_KEYS),
        "additionalProperties": False,
        "properties": {
            "name": {"const": descriptor["name"]},
            "description": {"type": "string"},
            "input_schema": {"type": "object"},
            "callable_alone": {"type": "boolean"},
            "mcp": {"type": "boolean"},
            "changes_state": {
                "type": "boolean",
                "description": "a call changes state or spends the "
                "person's quota (absent: taken as true); the person approves such a call",
            },
        },
    }
    caller = [{"exchanged": []}]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"agentfn tool {descriptor['name']}",
            "version": version,
            "description": descriptor["description"],
        },
        "components": {
            "securitySchemes": {
                "exchanged": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "the caller's token exchanged for this tool by a trusted "
                    "service (RFC 8693: aud = this tool, act = the service)",
                }
            },
            "schemas": {"Problem": spec.problem_schema(), "Descriptor": descriptor_schema, "Content": content_schema},
        },
        "paths": {
            "/v1/tool": {
                "get": {
                    "operationId": "describeTool",
                    "summary": "The tool's descriptor.",
                    "security": caller,
                    "responses": {
                        "200": {
                            "description": "the descriptor",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Descriptor"}}},
                        },
                        **problems(401),
                    },
                }
            },
            "/v1/call": {
                "post": {
                    "operationId": "callTool",
                    "summary": "Call the tool with checked arguments, as the caller.",
                    "security": caller,
                    "requestBody": {"required": True, "content": {"application/json": {"schema": call_schema(descriptor)}}},
                    "responses": {
                        "200": {
                            "description": "what the tool found",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "required": ["content"],
                                        "additionalProperties": False,
                                        "properties": {"content": {"$ref": "#/components/schemas/Content"}},
                                    }
                                }
                            },
                        },
                        **problems(400, 401, 413, 415, 422, *call_problems),
                    },
                }
            },
        },
    }


# --- the platform service behind a read tool -------------------------------------------------------------


def not_allowed(service: str) -> ProblemError:
    return ProblemError(
        403, "Forbidden", f"the {service} service does not allow this caller", type=problem_type("not-allowed")
    )


def upstream_problem(status: int, detail: str) -> ProblemError:
    title = {502: "Bad Gateway", 504: "Gateway Timeout"}[status]
    return ProblemError(status, title, detail, type=problem_type("upstream"))


class Upstream:
    """The platform service behind a read tool, called as the caller: a token exchanged for it and nothing else.

    One connection per call, no retries (the caller's turn has a deadline), no redirects (http.client
    follows none, so the token travels nowhere else), a timeout on connect and on every read, and a cap
    on the answer's size. What the service says goes into no problem.
    """

    MAX_BYTES = 1024 * 1024

    def __init__(self, service: str, base_url: str, timeout: float, tokens: TokenExchange | None = None, audience: str = ""):
        parts = urllib.parse.urlsplit(base_url)
        self.tokens = tokens or TokenExchange(mode="raw", url="", token_file="")
        self.audience = audience
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RuntimeError(f"the {service} upstream URL must be an http(s) URL")
        self.service, self.timeout = service, timeout
        self._https, self._host, self._port = parts.scheme == "https", parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/")

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def get_json(self, path: str, caller: Caller, fields: Mapping[str, Any] | None = None) -> Any:
        """GET `path` as the caller; the JSON answer, or the problem that explains why not."""
        target = self._prefix + path + ("?" + urllib.parse.urlencode(fields) if fields else "")
        try:
            token = self.tokens.token_for(caller, self.audience, self.timeout)
        except ExchangeFailed as failed:
            if failed.status in (401, 403):
                raise not_allowed(self.service) from None
            raise upstream_problem(
                504 if failed.status == 504 else 502, f"no token for the {self.service} service: {failed.detail}"
            ) from None
        headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
        telemetry.inject(headers)  # the platform service's own traces join the turn's
        conn = self._connection(self.timeout)
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
            status = response.status
            if status in (401, 403):
                raise not_allowed(self.service)
            if status >= 500:
                raise upstream_problem(502, f"the {self.service} service failed (HTTP {status})")
            if status != 200:
                raise upstream_problem(502, f"the {self.service} service answered outside its contract (HTTP {status})")
            data = response.read(self.MAX_BYTES + 1)
        except TimeoutError:
            raise upstream_problem(504, f"the {self.service} service did not answer within {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException):  # refused, reset, unresolvable, broken off
            raise upstream_problem(502, f"the {self.service} service is not answering") from None
        finally:
            conn.close()
        if len(data) > self.MAX_BYTES:
            raise upstream_problem(502, f"the {self.service} service's answer is larger than {self.MAX_BYTES} bytes")
        try:
            return json.loads(data)
        except ValueError:
            raise upstream_problem(502, f"the {self.service} service's answer is not JSON") from None

    def healthy(self) -> bool:
        """Readiness: the service answers its (unauthenticated) health door."""
        conn = self._connection(min(self.timeout, 1.0))
        try:
            conn.request("GET", self._prefix + "/healthz")
            return conn.getresponse().status == 200
        finally:
            conn.close()


def outside_contract(service: str, what: str) -> ProblemError:
    return upstream_problem(502, f"the {service} service answered outside its contract ({what})")


def read_tool_app(
    package: str,
    env: Mapping[str, str],
    *,
    service: str,
    url_variable: str,
    summarise: Callable[[Upstream, Caller, dict[str, Any]], Any],
    content_schema: dict[str, Any],
) -> Flask:
    """A read tool's app: descriptor, doors, upstream as the caller, readiness = the upstream answers."""
    settings = ReadToolSettings.from_env(env, TOOL=url_variable.removeprefix("AGENTFN_").removesuffix("_UPSTREAM_URL"))
    descriptor = load_descriptor(package)
    name = descriptor["name"]
    audience = settings.upstream_audience or f"agentfn:upstream:{name}"
    upstream = Upstream(
        service, settings.upstream_url, settings.upstream_timeout_seconds, TokenExchange.from_env(env), audience
    )
    app = create_app(
        f"agentfn.{descriptor['name']}",
        openapi=openapi(descriptor, content_schema, call_problems=(403, 502, 504)),
        readiness={"upstream": upstream.healthy},
        identity=Identity.from_env(env, gateway=False, audience=f"agentfn:tool:{name}"),
        max_request_bytes=settings.max_request_bytes,
    )
    app.register_blueprint(doors(descriptor, lambda caller, arguments: summarise(upstream, caller, arguments)))
    return app


def clip(value: Any, limit: int) -> str:
    """A string of at most `limit` characters, whatever the service sent (ellipsis when cut)."""
    text = " ".join(str(value).split()) if value is not None else ""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --- test doubles: the common part of the dev upstreams --------------------------------------------------


class DevUpstreamControls:
    """What a test (or the dev stack) sets on a dev upstream: faults to play and the tokens it received."""

    def __init__(self, env: Mapping[str, str]):
        settings = DevUpstreamSettings.from_env(env)
        self.delay_seconds, self.fail_status = settings.delay_seconds, settings.fail_status
        self.received: list[str] = []  # the raw bearer tokens, as they arrived, newest last (a test double's log)


def dev_upstream_app(
    name: str, env: Mapping[str, str] | None, routes: Callable[[Flask, Callable[[], Caller]], None]
) -> Flask:
    """A dev upstream: takes only tokens exchanged for it (`agentfn:upstream:<name>`, or the audience in
    `AGENTFN_EXCHANGED_AUDIENCE`) by an actor in `AGENTFN_TRUSTED_ACTORS`, as a platform service would."""
    env = dict(os.environ if env is None else env)
    identity = Identity.from_env(env, gateway=False, audience=f"agentfn:upstream:{name}")
    controls = DevUpstreamControls(env)
    app = Flask(f"agentfn.{name}.dev_upstream", instance_path=os.path.join(os.path.dirname(__file__), "instance"))
    app.json.sort_keys = False
    app.extensions["agentfn.dev_upstream"] = controls

    def caller() -> Caller:
        raw = request.environ.get("HTTP_AUTHORIZATION", "")
        controls.received.append(raw[len("Bearer ") :] if raw.startswith("Bearer ") else raw)
        del controls.received[:-100]
        if controls.delay_seconds:
            time.sleep(controls.delay_seconds)
        if controls.fail_status:
            raise ProblemError(controls.fail_status, "Dev upstream fault", "a fault the test asked for")
        return verify_caller(identity.caller, bearer_token())

    @app.errorhandler(ProblemError)
    def on_problem(problem: ProblemError):
        return jsonify(problem.to_dict()), problem.status

    @app.get("/healthz")
    def healthz():
        return jsonify(status="ok")

    routes(app, caller)
    return app


def require_group(caller: Caller, allowed: set[str]) -> None:
    """A dev upstream's rule: readers are callers in one of `allowed`."""
    if not allowed & set(caller.groups):
        raise forbidden("this caller may not read this")
