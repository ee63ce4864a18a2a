"""The model function's request and response shapes: one source for validation and for /openapi.json."""

from __future__ import annotations

from typing import Any

from agentfn.shared import openapi as spec
from agentfn.shared.contract import CHANNELS

MAX_MESSAGES = 200
MAX_CONTENT = 32000
# What a request may not carry: tools are the platform's (T1). Checked before the schema, so the
# refusal says why rather than "unknown field".
CALLER_TOOL_KEYS = frozenset(
    {
        "tools",
        "functions",
        "tool_choice",
        "function_call",
        "parallel_tool_calls",
        "response_format",
        "tool_resources",
        "mcp_servers",
    }
)
CALLER_TOOL_MESSAGE_KEYS = frozenset({"tool_calls", "function_call", "tool_call_id", "name"})
CALLER_TOOL_ROLES = frozenset({"tool", "function"})

# Not blank, no NUL; linear in a backtracking engine (the same pattern as memory's, which says why).
NOT_BLANK = "^[ \\t\\n\\r\\f\\v]*[^\\u0000 \\t\\n\\r\\f\\v][^\\u0000]*$"
MESSAGE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["role", "content"],
    "properties": {
        "role": {"type": "string", "enum": ["user", "assistant"]},
        "content": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT, "pattern": NOT_BLANK},
    },
}
MESSAGES = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_MESSAGES,
    "items": MESSAGE,
    "description": "the conversation, oldest first; the last message is the person's (role user)",
}
MAX_APPROVALS = 4  # no more than a turn's steps
APPROVALS = {
    "type": "array",
    "maxItems": MAX_APPROVALS,
    "description": "the person's answers to the calls the last turn asked about (its `needs_approval` steps): the "
    "approved calls run first, as this turn's steps; the declined are shown to the model as declined. Sent with the "
    "`messages` of the turn that asked, unchanged: a token is bound to that conversation",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["token", "approve"],
        "properties": {
            "token": {
                "type": "string",
                "minLength": 1,
                "maxLength": 65536,
                "description": "the `approval` of a `needs_approval` step, as it came",
            },
            "approve": {"type": "boolean"},
        },
    },
}
TURN = {
    "type": "object",
    "additionalProperties": False,
    "required": ["messages"],
    "properties": {"messages": MESSAGES, "approvals": APPROVALS},
}
SESSION_END = {
    "type": "object",
    "additionalProperties": False,
    "required": ["messages"],
    "properties": {
        "messages": MESSAGES,
        "session_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._:-]+$"},
    },
}
CALL = {
    "type": "object",
    "additionalProperties": False,
    "required": ["arguments"],
    "properties": {"arguments": {"type": "object"}},
}
WARM = {
    "type": "object",
    "additionalProperties": False,
    "required": ["caller"],
    "properties": {
        "caller": {
            "type": "string",
            "minLength": 1,
            "maxLength": 8192,
            "description": "the token of the person whose turns to warm (a caller token, as the gateway's)",
        }
    },
}
ANY_OBJECT = {"type": "object"}

ENTRY = {
    "type": "object",
    "required": ["id", "kind", "text"],
    "properties": {
        "id": {"type": "string"},
        "kind": {"type": "string"},
        "text": {"type": "string"},
        "source": {"type": "string"},
        "created_at": {"type": "string"},
        "updated_at": {"type": "string"},
        "session_id": {"type": ["string", "null"]},
    },
}
TOOL = {
    "type": "object",
    "required": ["name", "description", "input_schema"],
    "properties": {"name": {"type": "string"}, "description": {"type": "string"}, "input_schema": {"type": "object"}},
}
AGENT = {
    "type": "object",
    "required": ["name", "brief", "tier", "memory", "tools", "limits"],
    "properties": {
        "name": {"type": "string"},
        "brief": {"type": "string"},
        "tier": {"type": "string"},
        "memory": {"enum": ["none", "preferences", "facts"]},
        "tools": {"type": "array", "items": {"type": "string"}},
        "limits": {
            "type": "object",
            "properties": {
                "steps": {"type": "integer"},
                "tokensPerTurn": {"type": "integer"},
                "deadlineSeconds": {"type": "integer"},
            },
        },
    },
}
NULLABLE_STRING, NULLABLE_INTEGER = {"type": ["string", "null"]}, {"type": ["integer", "null"]}
GENERATION = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "id",
        "kind",
        "channel",
        "subject_hash",
        "agent",
        "tier",
        "status",
        "problem",
        "tokens_in",
        "tokens_out",
        "rounds",
        "steps",
        "tools",
        "started_at",
        "duration_ms",
    ],
    "description": "one generation as the model function records it: who (hashed), what ran, how long; never text",
    "properties": {
        "id": {"type": "string", "format": "uuid", "description": "the generation_id its caller was given"},
        "kind": {"enum": ["turn", "session_end", "tool_call"]},
        "channel": {
            "enum": list(CHANNELS),
            "description": "step: an agent's turn or session end; alone: a tool called on its own; mcp: over /mcp. "
            "This door said agent for step before the channel had one name; the stored records say step too.",
        },
        "subject_hash": {
            "type": "string",
            "pattern": "^[0-9a-f]{12}$",
            "description": "the caller's pseudonym, as the logs' subject_hash",
        },
        "agent": NULLABLE_STRING,
        "tier": NULLABLE_STRING,
        "status": {"type": "string", "description": "running, ok, error, deadline, budget or cancelled"},
        "problem": {**NULLABLE_INTEGER, "description": "the HTTP status of the problem that ended it, if one did"},
        "tokens_in": {"type": "integer", "minimum": 0},
        "tokens_out": {"type": "integer", "minimum": 0},
        "rounds": {"type": "integer", "minimum": 0},
        "steps": {"type": "integer", "minimum": 0},
        "tools": {
            "type": "array",
            "description": "the tool calls, in order",
            "items": {
                "type": "object",
                "required": ["tool", "status", "ms"],
                "properties": {"tool": {"type": "string"}, "status": {"type": "string"}, "ms": {"type": "number"}},
            },
        },
        "started_at": {"type": "string", "format": "date-time"},
        "duration_ms": {**NULLABLE_INTEGER, "description": "null while it runs"},
    },
}
GRANT_ROW = {
    "type": "object",
    "additionalProperties": False,
    "required": ["agent", "tool", "subjects", "groups", "channel", "daily", "approval", "grant"],
    "description": "one row of `agentfn audit`: `-` where a column has nothing (no agent, subjects, groups or limit)",
    "properties": {
        "agent": {"type": "string"},
        "tool": {"type": "string"},
        "subjects": {"type": "string", "description": "comma-separated"},
        "groups": {"type": "string", "description": "comma-separated"},
        "channel": {"enum": list(CHANNELS)},
        "daily": {"type": "string", "description": "daily limit"},
        "approval": {"enum": ["required", "waived", "-"]},
        "grant": {"type": "string"},
    },
}
EVENTS = """Server-sent events, in this order: `recall` `{entries}` (agents with memory), then for each tool call
`step` `{n, tool, arguments, status: "started"}` and `step` `{n, tool, arguments, status: "ok"|"error", ms, result}`;
a call not run is one `step`: `status: "needs_approval"` with its `approval` token (the person approves it in the next
turn request's `approvals`; a `forget`'s also has `note` `{id, kind, text}`, the note it deletes), `"declined"` (the
person declined it), or `"repeat"` (`repeat_of`: the step that made the same call; `result`: that step's); `delta`
`{text}` pieces of the answer as they arrive, and at the end `done` `{cited, steps, pending, usage, generation_id,
timing}` (`cited`: the ids of the recalled entries the answer used, never one not recalled in the turn; `pending`: the
numbers of the steps awaiting approval, the turn ended for them; `timing`: `ms`, `engine_ms`, `tools_ms` of the
turn),
or instead `error` (a problem, with `generation_id`) when the turn cannot finish. First of all, `wait` `{reason:
"warming", detail}` when the engine is still reading the agent's prompt ahead of the turns (the turn waits for it)."""

FAILURES = {  # a door's problems by status
    400: "Bad request",
    401: "No valid caller token",
    403: "An approval forged, altered, expired, another caller's or another agent's, sent with another conversation "
    "than the one that asked, or for a tool not granted; an admin door for a caller in no admin group; the platform's "
    "own door for a caller or an untrusted service account",
    404: "No such agent or tool for this caller",
    409: "An approval already used",
    413: "Body too large",
    415: "Not JSON",
    422: "Invalid body, caller-declared tools (T1), or a broken rule",
    429: "The caller's tokens for today are spent (see Retry-After), or a daily limit",
    502: "A part or the engine failed",
    503: "A dependency or the tier is unavailable",
    504: "Deadline",
}


def openapi(version: str = "1.0.0") -> dict[str, Any]:
    def problems(*codes: int) -> dict:
        return spec.problems(FAILURES, *codes)

    def ok(description: str, schema: dict, status: str = "200") -> dict:
        return {status: spec.ok(description, schema)}

    caller = [{"caller": []}]
    name = {"name": "agent", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 63}}
    tool = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 64}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentfn model function",
            "version": version,
            "description": "The bounded, traced agent loop, ListTools/CallTool and MCP.",
        },
        "components": {
            "securitySchemes": {
                "caller": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "service": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            },
            "schemas": {
                "Problem": spec.problem_schema(),
                "Entry": ENTRY,
                "Tool": TOOL,
                "Agent": AGENT,
                "Generation": GENERATION,
                "GrantRow": GRANT_ROW,
            },
        },
        "security": caller,
        "paths": {
            "/v1/agents": {
                "get": {
                    "operationId": "listAgents",
                    "summary": "The agents the caller is granted.",
                    "responses": {
                        **ok(
                            "the agents",
                            {
                                "type": "object",
                                "required": ["agents"],
                                "properties": {"agents": {"type": "array", "items": {"$ref": "#/components/schemas/Agent"}}},
                            },
                        ),
                        **problems(401),
                    },
                }
            },
            "/v1/agents/{agent}/turns": {
                "post": {
                    "operationId": "takeTurn",
                    "summary": "One turn of the agent, streamed.",
                    "parameters": [name],
                    "requestBody": spec.json_body(TURN),
                    "responses": {
                        "200": {"description": EVENTS, "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                        **problems(400, 401, 403, 404, 409, 413, 415, 422, 429, 503),
                    },
                }
            },
            "/v1/agents/{agent}/sessions/end": {
                "post": {
                    "operationId": "endSession",
                    "summary": "End a session: its summary is kept as an episode.",
                    "parameters": [name],
                    "requestBody": spec.json_body(SESSION_END),
                    "responses": {
                        **ok(
                            "the episode memory kept",
                            {
                                "type": "object",
                                "required": ["episode"],
                                "properties": {"episode": {"$ref": "#/components/schemas/Entry"}},
                            },
                            "201",
                        ),
                        **problems(400, 401, 404, 413, 415, 422, 429, 502, 503, 504),
                    },
                }
            },
            "/internal/v1/engines/warm": {
                "post": {
                    "operationId": "warmEngines",
                    "summary": "Warm the engines' prompt caches with a person's agents' system prompts (the "
                    "platform's own service account only; never routed).",
                    "description": "One round per agent the person named by `caller` is granted, with the system prompt "
                    "and tool listing of their turns with it, one token written: the engine's prompt cache then holds "
                    "them. Not a turn: nothing recorded, nothing of the person's day spent; a turn with a prompt being "
                    "read waits for the read to end. Only a trusted service account may ask (a caller's token: 403); "
                    "at most one warm-up runs per agent at a time, a second joins the first (`joined`). The local "
                    "platform asks as it starts.",
                    "security": [{"service": []}],
                    "requestBody": spec.json_body(WARM),
                    "responses": {
                        **ok(
                            "each agent warmed, or why not",
                            {
                                "type": "object",
                                "required": ["agents"],
                                "properties": {
                                    "agents": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["agent", "ok", "ms"],
                                            "properties": {
                                                "agent": {"type": "string"},
                                                "ok": {"type": "boolean"},
                                                "ms": {"type": "number"},
                                                "failed": {"type": "string"},
                                                "joined": {"type": "boolean"},
                                            },
                                        },
                                    }
                                },
                            },
                        ),
                        **problems(400, 401, 403, 413, 415, 422),
                    },
                }
            },
            "/v1/tools": {
                "get": {
                    "operationId": "listTools",
                    "summary": "The tools the caller may call on their own.",
                    "responses": {
                        **ok(
                            "the tools",
                            {
                                "type": "object",
                                "required": ["tools"],
                                "properties": {"tools": {"type": "array", "items": {"$ref": "#/components/schemas/Tool"}}},
                            },
                        ),
                        **problems(401),
                    },
                }
            },
            "/v1/tools/{name}/call": {
                "post": {
                    "operationId": "callTool",
                    "summary": "Call a tool on its own, as the caller.",
                    "parameters": [tool],
                    "requestBody": spec.json_body(CALL),
                    "responses": {
                        **ok("what the tool found", {"type": "object", "required": ["content"]}),
                        **problems(400, 401, 404, 413, 415, 422, 429, 502, 503, 504),
                    },
                }
            },
            "/v1/admin/generations": {
                "get": {
                    "operationId": "adminGenerations",
                    "summary": "Admins only: every caller's generations, newest first "
                    "(who hashed, tools, statuses, timings, tokens; never text).",
                    "parameters": [
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                        },
                        {
                            "name": "before",
                            "in": "query",
                            "description": "only generations started before this time (paging: the last one's started_at)",
                            "schema": {"type": "string", "format": "date-time"},
                        },
                    ],
                    "responses": {
                        **ok(
                            "the generations",
                            {
                                "type": "object",
                                "required": ["generations"],
                                "properties": {
                                    "generations": {"type": "array", "items": {"$ref": "#/components/schemas/Generation"}}
                                },
                            },
                        ),
                        **problems(400, 401, 403, 503),
                    },
                }
            },
            "/v1/admin/calls": {
                "get": {
                    "operationId": "adminCalls",
                    "summary": "Admins only: every caller's tool calls, newest first "
                    "(when, who hashed, agent, tool, channel, outcome, ms, grant; never arguments or results).",
                    "parameters": [
                        {"name": "agent", "in": "query", "schema": {"type": "string"}},
                        {"name": "tool", "in": "query", "schema": {"type": "string"}},
                        {"name": "channel", "in": "query", "schema": {"enum": list(CHANNELS)}},
                        {
                            "name": "outcome",
                            "in": "query",
                            "description": "ok, error, needs_approval, declined, repeat",
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "since",
                            "in": "query",
                            "description": "only calls of generations started at or after this time",
                            "schema": {"type": "string", "format": "date-time"},
                        },
                        {
                            "name": "before",
                            "in": "query",
                            "description": "only calls of generations started before this time",
                            "schema": {"type": "string", "format": "date-time"},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                        },
                        {
                            "name": "cursor",
                            "in": "query",
                            "description": "the next page: the `next` of the page before",
                            "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]+$"},
                        },
                    ],
                    "responses": {
                        **ok(
                            "the calls",
                            {
                                "type": "object",
                                "required": ["calls", "next"],
                                "properties": {
                                    "calls": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": [
                                                "at",
                                                "generation_id",
                                                "n",
                                                "subject_hash",
                                                "agent",
                                                "tool",
                                                "channel",
                                                "outcome",
                                                "ms",
                                                "grant",
                                            ],
                                            "properties": {
                                                "at": {
                                                    "type": "string",
                                                    "format": "date-time",
                                                    "description": "when its generation started",
                                                },
                                                "generation_id": {"type": "string"},
                                                "n": {"type": "integer", "description": "its step"},
                                                "subject_hash": {"type": "string"},
                                                "agent": {"type": ["string", "null"]},
                                                "tool": {"type": "string"},
                                                "channel": {"enum": list(CHANNELS)},
                                                "outcome": {"type": "string"},
                                                "ms": {"type": ["number", "null"]},
                                                "grant": {"type": ["string", "null"]},
                                                "page": {
                                                    "type": ["object", "null"],
                                                    "description": "open_page only: the fetch's audit (no path)",
                                                    "properties": {
                                                        "host": {"type": "string"},
                                                        "final_host": {"type": ["string", "null"]},
                                                        "status": {"type": ["integer", "null"]},
                                                        "bytes": {"type": "integer"},
                                                        "outcome": {"type": "string"},
                                                    },
                                                },
                                                "page_audit": {
                                                    "enum": ["found", "none", "unavailable"],
                                                    "description": "open_page only: whether the page fetcher's audit has it",
                                                },
                                            },
                                        },
                                    },
                                    "next": {
                                        "type": ["string", "null"],
                                        "description": "the cursor of the next page, if there may be one",
                                    },
                                },
                            },
                        ),
                        **problems(400, 401, 403, 503),
                    },
                }
            },
            "/v1/admin/grants": {
                "get": {
                    "operationId": "adminGrants",
                    "summary": "Admins only: who may call what, the rows `agentfn audit` prints.",
                    "responses": {
                        **ok(
                            "the registry in force as rows",
                            {
                                "type": "object",
                                "required": ["revision", "rows"],
                                "properties": {
                                    "revision": {"type": "string", "description": "the registry's revision"},
                                    "rows": {"type": "array", "items": {"$ref": "#/components/schemas/GrantRow"}},
                                },
                            },
                        ),
                        **problems(401, 403),
                    },
                }
            },
            **{
                path: {
                    "get": {
                        "operationId": "protectedResource" + suffix,
                        "security": [],
                        "summary": "RFC 9728 metadata of /mcp: its resource URL and the issuer of its tokens.",
                        "responses": {
                            "200": {
                                "description": "the protected-resource metadata",
                                "content": {
                                    "application/json": {
                                        "schema": {
                                            "type": "object",
                                            "required": ["resource", "authorization_servers"],
                                            "properties": {
                                                "resource": {"type": "string"},
                                                "authorization_servers": {"type": "array", "items": {"type": "string"}},
                                                "bearer_methods_supported": {"type": "array", "items": {"type": "string"}},
                                                "resource_name": {"type": "string"},
                                            },
                                        }
                                    }
                                },
                            }
                        },
                    }
                }
                for path, suffix in (
                    ("/.well-known/oauth-protected-resource", ""),
                    ("/.well-known/oauth-protected-resource/mcp", "OfMcp"),
                )
            },
            "/mcp": {
                "post": {
                    "operationId": "mcp",
                    "summary": "MCP over Streamable HTTP (stateless, JSON responses): tools/list, tools/call.",
                    "requestBody": spec.json_body(
                        {
                            "type": "object",
                            "required": ["jsonrpc", "method"],
                            "properties": {
                                "jsonrpc": {"const": "2.0"},
                                "method": {"type": "string"},
                                "id": {"type": ["integer", "string"]},
                                "params": {"type": "object"},
                            },
                            "description": "a JSON-RPC 2.0 message of MCP (its shapes are the protocol's)",
                        }
                    ),
                    "responses": {
                        "200": {
                            "description": "a JSON-RPC response",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "202": {"description": "a notification was accepted"},
                        "400": {"description": "not a valid MCP message"},
                        "401": {"description": "no valid token for this resource (WWW-Authenticate names its metadata)"},
                        "405": {"description": "POST only: stateless, no event stream, no session to end"},
                        "406": {"description": "the Accept header must allow application/json"},
                        "413": {"description": "body too large"},
                        "415": {"description": "not JSON"},
                        "421": {"description": "the Host header is not allowed"},
                        "422": {"description": "not a valid MCP message"},
                    },
                }
            },
        },
    }
