"""What every tool function serves: its descriptor and its two doors, with their OpenAPI document.

A tool's descriptor is `src/agentfn/<tool>/tool.json`, the one source for `GET /v1/tool`, for the argument
check of `POST /v1/call`, and for whoever else lists tools (the model function, the operator, the chart).
The doors take only tokens the model function exchanged for this tool (`identity`); `call` does the work
as the caller. A read tool's work is a call to the platform service behind it (`upstream`), and its app is
the two put together, with its settings (`read_tool`).

Start-up stays light (tools are scale-to-zero, so a cold start is paid on a user's turn): jsonschema is
imported and the schema compiled after ready (`app.warm_up`), or by the first call if it comes first, never on
the way to ready.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

from flask import Blueprint, g, jsonify

from . import openapi as spec
from . import telemetry
from .app import warm_up
from .identity import Caller, caller_required
from .problems import ProblemError

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
    bp.record_once(lambda state: warm_up(state.app, body_schema.get))

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
