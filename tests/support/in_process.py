"""The model function built by its app factory in this process, and the test doubles around it: no gunicorn, no
engine process. The store is the session's Postgres and tokens come from the session's dev issuer (in this process
too); the engine, memory and the tool functions are test doubles, so each test says what they do and sees what
reached them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any

import psycopg
from flask import Flask, jsonify, request
from psycopg.rows import dict_row

from agentfn.devstack.harness.servers import Served
from agentfn.model.engines import Cited, DeadlinePassed, EngineFailed, Text, ToolRequest, Usage
from agentfn.shared.app import create_app as function_app
from agentfn.shared.contract import audience
from agentfn.shared.identity import Identity
from agentfn.shared.tool_function import check_descriptor, doors
from agentfn.shared.tool_function import openapi as tool_openapi
from support.model import EVERYONE, access, agent, parse_sse

IN_PROCESS_DAILY = 20000  # the in-process function's tokens per caller per day


def in_process_registry() -> dict:
    """The agents of the in-process tests: a checker of two steps a turn with a read and a tool that changes state
    (its grant asks the person), a keeper whose memory tools ask too, and a hasty one with a deadline of one second."""
    everyone = access([EVERYONE])
    agents = {
        "checker": agent(
            "Checks the platform.", "fast", "none", {"platform_status": everyone, "close_incident": everyone}, steps=2
        ),
        "keeper": agent("Keeps facts.", "fast", "facts", {"remember": everyone, "forget": everyone}),
        "hasty": agent("Answers fast.", "fast", "none", {"platform_status": everyone}, deadline=1),
    }
    return {
        "apiVersion": "agentfn.dev/v1alpha1",
        "kind": "Registry",
        "revision": "sha256:" + "1" * 64,
        "agents": agents,
        "alone": {},
        "mcp": {},
    }


class EngineDouble:
    """TEST DOUBLE of an OpenAI-compatible engine (outside this project), in this process: it stands in for
    `agentfn.model.engines.Engine` (create_app's `engines`) and plays the rounds a test scripts.

    A round is a dict: `text` (the answer, in pieces), `calls` (`[{name, arguments}]`, asked for only when the round
    offers tools, as a native engine does), `usage` (`(tokens_in, tokens_out)`; default `(100, 10)`), `delay`
    (seconds before answering; the turn's deadline cuts it as the real client's wall clock does), `cited` (the ids a
    constrained engine's reply says its answer used) and `fail` (an
    `EngineFailed` kind, with `status` for "status"). A round not scripted is a short answer. Every request is kept:
    what the loop sent, which tools it offered and how many tokens it allowed.
    """

    def __init__(self):
        self._rounds: deque[dict] = deque()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, tier) -> TierEngine:
        return TierEngine(self, tier)  # one script for every tier, each tier's engine its own as the real ones are

    def script(self, *rounds: dict) -> None:
        """The rounds of the requests to come, in order; the requests kept so far are forgotten."""
        with self._lock:
            self._rounds = deque(rounds)
            self.requests = []

    def round(self, messages: list[dict], tools: list | None, max_tokens: int, deadline: float, notes=None, address=None):
        with self._lock:
            self.requests.append(
                {
                    "messages": json.loads(json.dumps(messages)),
                    "tools": [t.name for t in tools] if tools else None,
                    "max_tokens": max_tokens,
                    "notes": notes,
                    "address": address,
                }
            )
            step = self._rounds.popleft() if self._rounds else {"text": "Scripted answer."}
        if step.get("delay"):
            time.sleep(max(0.0, min(step["delay"], deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                raise DeadlinePassed()
        if "fail" in step:
            raise EngineFailed(step["fail"], step.get("status"))
        text = step.get("text", "")
        for i in range(0, len(text), 8):
            yield Text(text[i : i + 8])
        for i, call in enumerate(step.get("calls", ()) if tools else ()):
            raw = json.dumps(call["arguments"])
            yield ToolRequest(f"call_{i}", call["name"], call["arguments"], raw)
        if "cited" in step:
            yield Cited(step["cited"])
        yield Usage(*step.get("usage", (100, 10)))


class TierEngine:
    """One tier's engine as the model function sees it (its `tier`, its `round`), answering from the double's script."""

    def __init__(self, double: EngineDouble, tier):
        self.tier = tier
        self.round = double.round


class MemoryDouble(Served):
    """TEST DOUBLE of memory, served on loopback in this process: recall answers the notes a test gives it, a kept
    or forgotten note or an episode is only recorded. `calls` holds (method, path) of every request that reached it."""

    def __init__(self):
        self.notes: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str]] = []
        self.episodes: list[dict[str, Any]] = []  # what WriteEpisode was asked to keep
        app = Flask("memory_double")

        @app.post("/v1/recall")
        def recall():
            self.calls.append(("POST", "/v1/recall"))
            return jsonify(entries=self.notes)

        @app.post("/v1/entries")
        def keep():
            self.calls.append(("POST", "/v1/entries"))
            body = request.get_json()
            return jsonify(id="n-kept", kind=body["kind"], text=body["text"]), 201

        @app.post("/internal/v1/episodes")
        def write_episode():
            self.calls.append(("POST", "/internal/v1/episodes"))
            body = request.get_json()
            self.episodes.append(body)
            return jsonify(id="e-kept", kind="episode", text=body["text"], source="session"), 201

        @app.delete("/v1/entries/<entry_id>")
        def forget(entry_id):
            self.calls.append(("DELETE", f"/v1/entries/{entry_id}"))
            return "", 204

        super().__init__(app)

    def written(self) -> list[tuple[str, str]]:
        """The requests that would have changed what memory keeps."""
        return [c for c in self.calls if c != ("POST", "/v1/recall")]


def tool_double(issuer, name: str, *, changes_state: bool) -> Served:
    """TEST DOUBLE of a tool function of another team, built as every one is (`shared.app`, `shared.tool_function.doors`) and
    served on loopback in this process. It takes an optional `service` and answers with it; the arguments of every
    call that reached it are kept in `app.extensions["calls"]`."""
    descriptor = check_descriptor(
        {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()}.",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"service": {"type": "string", "maxLength": 40}},
            },
            "callable_alone": False,
            "mcp": False,
            "changes_state": changes_state,
        }
    )
    calls: list[dict] = []

    def run(caller, arguments):
        calls.append(arguments)
        return {"service": arguments.get("service", "all"), "healthy": True}

    app = function_app(
        f"agentfn.{name}",
        openapi=tool_openapi(descriptor, {"type": "object"}, call_problems=()),
        readiness={},
        identity=Identity.from_env(issuer.env(), gateway=False, audience=audience("tool", name)),
    )
    app.register_blueprint(doors(descriptor, run))
    app.extensions["calls"] = calls
    return Served(app)


def turn(client, token: str, agent: str, content: str, *, history=(), **body):
    """One turn through the door with Flask's test client: the response, and its events when it streamed."""
    response = client.post(
        f"/v1/agents/{agent}/turns",
        headers={"Authorization": f"Bearer {token}"},
        json={"messages": [*history, {"role": "user", "content": content}], **body},
    )
    text = response.get_data(as_text=True)  # reads the whole stream: the turn runs to its end here
    streamed = response.mimetype == "text/event-stream"
    return response, parse_sse(text) if streamed else None


def record(dsn: str, generation: str) -> dict[str, Any]:
    """The generation's row in the model function's record."""
    with psycopg.connect(dsn, options="-c search_path=model", row_factory=dict_row) as conn:
        return conn.execute("SELECT * FROM generations WHERE id = %s", (generation,)).fetchone()


def spent(dsn: str, subject: str) -> int:
    """The caller's tokens spent today, as their budget row says."""
    with psycopg.connect(dsn, options="-c search_path=model") as conn:
        return conn.execute("SELECT coalesce(sum(spent), 0) FROM token_budgets WHERE subject = %s", (subject,)).fetchone()[0]
