"""What every function's OpenAPI 3.1 document writes the same way: the problem-details schema, the problem
responses a door lists, a JSON request body and a JSON answer. The function keeps its own doors and shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .problems import PROBLEM_JSON

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
RETRY_AFTER = {
    "Retry-After": {"description": "seconds to wait before trying again", "schema": {"type": "integer", "minimum": 1}}
}


def problem_schema(**properties: dict[str, Any]) -> dict[str, Any]:
    """RFC 9457 problem details as every door answers them; `properties` adds (or describes) a part's own members."""
    return {
        "type": "object",
        "required": ["type", "title", "status"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "request_id": {"type": "string"},
            **properties,
        },
    }


def problems(descriptions: Mapping[int, str], *codes: int, retry_after: bool = False) -> dict[str, Any]:
    """The responses of a door's failures: each status with its description and the Problem schema; with
    `retry_after`, a 429 names its Retry-After header."""
    return {
        str(code): {
            "description": descriptions[code],
            **({"headers": RETRY_AFTER} if retry_after and code == 429 else {}),
            "content": {PROBLEM_JSON: {"schema": PROBLEM_REF}},
        }
        for code in codes
    }


def json_body(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A required JSON request body."""
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def ok(description: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON answer."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}
