"""The page door's request and response shapes: one source for validation and for /openapi.json."""

from __future__ import annotations

from agentfn.shared.openapi import problem_schema, problems
from agentfn.shared.problems import problem_type

from .guard import MAX_URL
from .refusals import KINDS

MAX_WINDOW = 40000
MIN_WINDOW = 100
MAX_OFFSET = 100_000_000
UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
MAX_GENERATIONS = 64  # 64 ids fit in a request line (gunicorn takes 4094 bytes)

OPEN = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_URL,
            "description": "an http or https URL of a public page, e.g. a link's href from an earlier window",
        },
        "offset": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_OFFSET,
            "description": "where the window starts, in characters of the page's text (default 0)",
        },
        "window": {
            "type": "integer",
            "minimum": MIN_WINDOW,
            "maximum": MAX_WINDOW,
            "description": "about how many characters to return (default configured)",
        },
        "step": {
            "type": "object",
            "additionalProperties": False,
            "required": ["generation_id", "n"],
            "description": "the model function's generation and step this call is, kept beside the audit row",
            "properties": {
                "generation_id": {"type": "string", "pattern": UUID},
                "n": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
        },
    },
}

FETCH = {
    "type": "object",
    "required": ["generation_id", "n", "at", "host", "final_host", "status", "bytes", "ms", "redirects", "outcome"],
    "properties": {
        "generation_id": {"type": "string"},
        "n": {"type": ["integer", "null"]},
        "at": {"type": "string", "format": "date-time"},
        "host": {"type": "string"},
        "final_host": {"type": ["string", "null"]},
        "status": {"type": ["integer", "null"]},
        "bytes": {"type": "integer"},
        "ms": {"type": "integer"},
        "redirects": {"type": "integer"},
        "outcome": {"type": "string", "description": "ok, or the refusal's kind"},
    },
}

PAGE = {
    "type": "object",
    "required": ["url", "final_url", "title", "text", "offset", "next_offset", "total_chars", "links"],
    "properties": {
        "url": {"type": "string", "description": "the URL asked for, normalised"},
        "final_url": {"type": "string", "description": "the URL after redirects; links resolve against it"},
        "title": {"type": "string"},
        "text": {"type": "string", "description": "the window of readable text; links appear as `text [n]`"},
        "offset": {"type": "integer", "minimum": 0},
        "next_offset": {"type": ["integer", "null"], "description": "where the next window starts; null at the end"},
        "total_chars": {"type": "integer", "minimum": 0},
        "links": {
            "type": "array",
            "description": "the links marked in this window; open one by calling again with its href",
            "items": {
                "type": "object",
                "required": ["n", "href", "text"],
                "properties": {
                    "n": {"type": "integer", "minimum": 1},
                    "href": {"type": "string"},
                    "text": {"type": "string"},
                },
            },
        },
    },
}

PROBLEM = problem_schema(
    type={"type": "string", "description": "about:blank, or one of " + ", ".join(problem_type(k) for k in KINDS)},
    reason={"type": "string", "description": "blocked-address: the class of address refused"},
    upstream_status={"type": "integer", "description": "upstream-error: the page's own HTTP status"},
    reset_at={"type": "string", "format": "date-time", "description": "budget-spent: when pages come back"},
    retry_after={"type": "integer"},
    limit={"type": "integer"},
)

FAILURES = {  # a door's problems by status
    400: "Bad request (the body is not JSON)",
    401: "No valid caller token",
    403: "blocked-address: the URL or a redirect leads to a non-public address",
    413: "Body too large",
    415: "Not JSON",
    422: "Invalid field, or bad-url, dns-failure, too-many-redirects, too-large, unsupported-type, bad-offset",
    429: "budget-spent: the caller's pages for today are spent (see Retry-After)",
    502: "upstream-error (the page failed), or dns-failure when the DNS server failed",
    503: "The database is unavailable",
    504: "timeout: the page did not arrive within the deadline",
}


def _problems(*codes: int) -> dict:
    return problems(FAILURES, *codes)


def openapi() -> dict:
    """The OpenAPI 3.1 document of the page fetcher's door."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentfn page fetcher",
            "version": "1.0.0",
            "description": "One guarded GET of a public http(s) page, read as text a window at a time. "
            "Called by the model function as the caller; never routed publicly.",
        },
        "components": {
            "securitySchemes": {
                "caller": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "the caller's token, forwarded by the model function",
                }
            },
            "schemas": {"Page": PAGE, "Fetch": FETCH, "Problem": PROBLEM},
        },
        "paths": {
            "/v1/open": {
                "post": {
                    "operationId": "openPage",
                    "summary": "Open a public page, or page through one opened lately, and read a window of it.",
                    "security": [{"caller": []}],
                    "requestBody": {"required": True, "content": {"application/json": {"schema": OPEN}}},
                    "responses": {
                        "200": {
                            "description": "a window of the page",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Page"}}},
                        },
                        **_problems(400, 401, 403, 413, 415, 422, 429, 502, 503, 504),
                    },
                },
            },
            "/v1/audit": {
                "get": {
                    "operationId": "fetchesOfGenerations",
                    "summary": "For an admin: the fetches of these generations, by host and size (never a path).",
                    "security": [{"caller": []}],
                    "parameters": [
                        {
                            "name": "generation_id",
                            "in": "query",
                            "required": True,
                            "style": "form",
                            "explode": True,
                            "schema": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": MAX_GENERATIONS,
                                "items": {"type": "string", "pattern": UUID},
                            },
                        }
                    ],
                    "responses": {
                        "200": {
                            "description": "the fetches, by generation then time",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "required": ["fetches"],
                                        "properties": {
                                            "fetches": {"type": "array", "items": {"$ref": "#/components/schemas/Fetch"}}
                                        },
                                    }
                                }
                            },
                        },
                        **_problems(400, 401, 403, 503),
                        # Refused by the server before the door: more ids than fit its request line (4094 bytes).
                        "414": {"description": "the query is longer than the server takes: ask for fewer generations"},
                    },
                },
            },
        },
    }
