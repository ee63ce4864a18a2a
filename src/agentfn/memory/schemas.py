"""The memory doors' request and response shapes: one source for validation and for /openapi.json."""

from __future__ import annotations

from agentfn.shared.openapi import json_body, ok, problem_schema, problems

MAX_TEXT = 1000  # characters of a fact or preference: a note, never a transcript
MAX_SOURCE = 300
MAX_QUERY = 4000
MAX_RECALL = 5  # entries a turn is shown (the RFC's cap); a request may ask for fewer
EPISODE_MAX_WORDS = 80
EPISODE_MAX_CHARS = 500
KINDS = ["fact", "preference", "episode"]
PUBLIC_KINDS = ["fact", "preference"]

# Not blank, and no NUL (Postgres text cannot hold it). Spelled out, not \S: ECMA and Python disagree on \S.
# Linear in a backtracking engine: leading blanks, the first other character, then anything but NUL (the form
# `[^NUL]*[^blank][^NUL]*` backtracks quadratically on a long text ending in NUL).
NOT_BLANK = "^[ \\t\\n\\r\\f\\v]*[^\\u0000 \\t\\n\\r\\f\\v][^\\u0000]*$"
text = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT, "pattern": NOT_BLANK}
source = {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE, "pattern": NOT_BLANK}

CREATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "text", "source"],
    "properties": {"kind": {"type": "string", "enum": PUBLIC_KINDS}, "text": text, "source": source},
}
CORRECT = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {"text": text, "source": source},
}
RECALL = {
    "type": "object",
    "additionalProperties": False,
    "required": ["query"],
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY, "pattern": NOT_BLANK},
        "kinds": {"type": "array", "items": {"type": "string", "enum": KINDS}, "minItems": 1, "uniqueItems": True},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RECALL},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 100000},
        "preferences": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_RECALL,
            "description": "also the caller's newest preferences, up to this many, however near the query (how a "
            "person wants to be answered holds for every question), within `limit` and `max_tokens`; default 0",
        },
    },
}
FORGET_EVERYTHING = "forget everything"  # the phrase a person types to forget every entry they have
FORGET_ALL = {
    "type": "object",
    "additionalProperties": False,
    "required": ["confirm"],
    "properties": {
        "confirm": {
            "const": FORGET_EVERYTHING,
            "description": f'exactly "{FORGET_EVERYTHING}": every entry of the caller is deleted',
        }
    },
}
EPISODE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["subject", "text"],
    "properties": {
        "subject": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": NOT_BLANK},
        "text": {"type": "string", "minLength": 1, "maxLength": EPISODE_MAX_CHARS, "pattern": NOT_BLANK},
        "session_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": r"^[A-Za-z0-9._:-]+$"},
    },
}

ENTRY = {
    "type": "object",
    "required": ["id", "kind", "text", "source", "created_at", "updated_at"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "kind": {"type": "string", "enum": KINDS},
        "text": {"type": "string"},
        "source": {"type": "string"},
        "created_at": {"type": "string", "format": "date-time"},
        "updated_at": {"type": "string", "format": "date-time"},
        "session_id": {"type": ["string", "null"]},
        "model": {"type": "string", "description": "the embedding model of the stored vector"},
    },
}
KEPT = {
    "allOf": [{"$ref": "#/components/schemas/Entry"}],
    "type": "object",
    "required": ["existing"],
    "properties": {
        "existing": {
            "type": "boolean",
            "description": "true: the subject already had this note (the same text once folded), and this is "
            "that entry; nothing new was kept",
        },
    },
}
RECALLED = {
    "allOf": [{"$ref": "#/components/schemas/Entry"}],
    "type": "object",
    "required": ["similarity", "matched"],
    "properties": {
        "similarity": {"type": "number", "description": "cosine similarity of the entry to the query"},
        "matched": {
            "type": "array",
            "items": {"type": "string", "enum": ["vector", "text", "standing"]},
            "description": "which ranking found it: the vector (above the threshold) and/or the text terms; "
            "`standing`: a preference shown whatever its similarity (the request's `preferences`)",
        },
        "date": {"type": "string", "format": "date", "description": "the day an episode happened"},
        "tokens": {"type": "integer"},
    },
}
RECEIPT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["deleted", "total", "at", "stays"],
    "properties": {
        "deleted": {
            "type": "object",
            "additionalProperties": False,
            "required": KINDS,
            "properties": {kind: {"type": "integer", "minimum": 0} for kind in KINDS},
            "description": "how many entries of each kind were deleted, rows and vectors",
        },
        "total": {"type": "integer", "minimum": 0},
        "at": {"type": "string", "format": "date-time", "description": "when they were deleted"},
        "stays": {
            "type": "array",
            "description": "every record of the platform that still names the caller, and why: counts, names and times "
            "of use, never anything the caller said",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["part", "record", "holds", "why", "until"],
                "properties": {
                    "part": {"type": "string", "description": "the part that keeps it"},
                    "record": {"type": "string", "description": "its table (`schema.table`), or logs and traces"},
                    "holds": {"type": "string", "description": "what of the caller it holds"},
                    "why": {"type": "string", "description": "why forgetting everything leaves it"},
                    "until": {"type": "string", "description": "when it goes, if it does"},
                },
            },
        },
    },
}

FAILURES = {  # a door's problems by status
    400: "Bad request",
    401: "No valid caller token",
    403: "Not allowed",
    404: "Not found",
    409: "Another entry already says this note (type .../duplicate-note, its id in entry_id)",
    413: "Body too large",
    415: "Not JSON",
    422: "Invalid field, or a text that is not a note: only an id, a number or code (type .../not-a-note), "
    "or forgetting everything without its confirmation phrase (type .../confirm-forget-all)",
    429: "The subject's entry cap (type .../entry-cap: forget some) or write rate (type .../write-rate) "
    "is spent; Retry-After says when to try again",
    503: "Database or model unavailable",
}


def _problems(*codes: int) -> dict:
    return problems(FAILURES, *codes, retry_after=True)


ENTRY_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
entry_ref = {"$ref": "#/components/schemas/Entry"}
kept_ref = {"$ref": "#/components/schemas/Kept"}
entries_list = {"type": "object", "required": ["entries"], "properties": {"entries": {"type": "array", "items": entry_ref}}}


def openapi(model: str) -> dict:
    """The OpenAPI 3.1 document of memory's doors."""
    caller = [{"caller": []}]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentfn memory",
            "version": "1.0.0",
            "description": f"Entries per subject, embedded with {model}, recalled with their sources.",
        },
        "components": {
            "securitySchemes": {
                "caller": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "a caller token from the platform gateway",
                },
                "service": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "a projected ServiceAccount token of a trusted service",
                },
            },
            "schemas": {"Entry": ENTRY, "Kept": KEPT, "Recalled": RECALLED, "Receipt": RECEIPT, "Problem": problem_schema()},
        },
        "paths": {
            "/v1/entries": {
                "get": {
                    "operationId": "listEntries",
                    "summary": "The caller's entries, newest first (the person's own token only: an exchanged one is 403).",
                    "security": caller,
                    "parameters": [
                        {"name": "kind", "in": "query", "schema": {"type": "string", "enum": KINDS}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                        {
                            "name": "offset",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0, "maximum": 1000000000},
                        },
                    ],
                    "responses": {"200": ok("entries", entries_list), **_problems(400, 401, 403, 422, 503)},
                },
                "post": {
                    "operationId": "createEntry",
                    "summary": "Keep a fact or a preference; a note the caller already has is answered, not kept twice "
                    "(an exchanged token keeps one: 403 after).",
                    "security": caller,
                    "requestBody": json_body(CREATE),
                    "responses": {
                        "201": ok("the entry kept (existing: false)", kept_ref),
                        "200": ok("the entry that already says this note (existing: true); nothing new was kept", kept_ref),
                        **_problems(400, 401, 403, 413, 415, 422, 429, 503),
                    },
                },
                "delete": {
                    "operationId": "forgetAllEntries",
                    "summary": f"Forget every entry of the caller, of every kind (rows and vectors), in one transaction; "
                    f'the body confirms it with the phrase "{FORGET_EVERYTHING}" (the person\'s own token only: an '
                    "exchanged one is 403).",
                    "security": caller,
                    "requestBody": json_body(FORGET_ALL),
                    "responses": {
                        "200": ok(
                            "the receipt: how many of each kind were deleted, and when; what stays, and why; no text",
                            {"$ref": "#/components/schemas/Receipt"},
                        ),
                        **_problems(400, 401, 403, 413, 415, 422, 503),
                    },
                },
            },
            "/v1/entries/{id}": {
                "parameters": [ENTRY_ID],
                "patch": {
                    "operationId": "correctEntry",
                    "summary": "Correct an entry's text or source (embedded again; the person's own token only: an "
                    "exchanged one is 403).",
                    "security": caller,
                    "requestBody": json_body(CORRECT),
                    "responses": {
                        "200": ok("the corrected entry", entry_ref),
                        **_problems(400, 401, 403, 404, 409, 413, 415, 422, 429, 503),
                    },
                },
                "delete": {
                    "operationId": "forgetEntry",
                    "summary": "Forget an entry: the row and its vector are deleted (an exchanged token forgets one: 403 "
                    "after).",
                    "security": caller,
                    "responses": {"204": {"description": "forgotten"}, **_problems(400, 401, 403, 404, 503)},
                },
            },
            "/v1/recall": {
                "post": {
                    "operationId": "recall",
                    "summary": "The caller's nearest entries to a query, above the threshold.",
                    "security": caller,
                    "requestBody": json_body(RECALL),
                    "responses": {
                        "200": ok(
                            "recalled entries",
                            {
                                "type": "object",
                                "required": ["entries", "threshold", "model"],
                                "properties": {
                                    "entries": {"type": "array", "items": {"$ref": "#/components/schemas/Recalled"}},
                                    "threshold": {"type": "number"},
                                    "model": {"type": "string"},
                                },
                            },
                        ),
                        **_problems(400, 401, 413, 415, 422, 503),
                    },
                },
            },
            "/internal/v1/episodes": {
                "post": {
                    "operationId": "writeEpisode",
                    "summary": "WriteEpisode: keep a session's summary for a subject (trusted services only; no route).",
                    "security": [{"service": []}],
                    "requestBody": json_body(EPISODE),
                    "responses": {
                        "201": ok("the episode kept", entry_ref),
                        **_problems(400, 401, 403, 413, 415, 422, 429, 503),
                    },
                },
            },
        },
    }
