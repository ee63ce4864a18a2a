"""TEST DOUBLE of the Radar's digest archive (outside this project), for the dev stack and the tests.

It speaks the contract in `upstream.md`, takes only a token exchanged for it (audience
`agentfn:upstream:radar_latest`, actor its read tool), verified with `agentfn.shared.identity` as the real service
would, and lists the digests each caller's groups allow: readers are `platform-users` and `staff`; only `staff` reads
the internal digests.
`flask --app 'agentfn.devstack.radar_latest:create_app()' run -h 127.0.0.1` (loopback only).

Configuration: `DevUpstreamSettings` (agentfn.devstack.upstream; docs/configuration.md), and identity's.
"""

from __future__ import annotations

from collections.abc import Mapping

from flask import Flask, abort, jsonify, request

from .upstream import dev_upstream_app, require_group

READERS = {"platform-users", "staff"}
STAFF = "staff"

# Newest first, as the Radar publishes them.
DIGESTS = [
    {
        "id": "d-2026-12-01-int",
        "title": "Internal: GPU slot plan for December",
        "published_at": "2026-12-01T17:00:00Z",
        "url": "https://radar.example/internal/d-2026-12-01",
        "summary": "Which tiers share the deep slot, and when.",
        "internal": True,
    },
    {
        "id": "d-2026-12-01",
        "title": "Week 48: small models, long contexts",
        "published_at": "2026-12-01T08:00:00Z",
        "url": "https://radar.example/digests/d-2026-12-01",
        "summary": "Three releases worth a look: a 1.5B model with a 128k window, a faster int4 kernel, and an "
        "embedding model that handles Croatian.",
    },
    {
        "id": "d-2026-11-24",
        "title": "Week 47: evaluation harnesses",
        "published_at": "2026-11-24T08:00:00Z",
        "url": "https://radar.example/digests/d-2026-11-24",
        "summary": "What the new harnesses measure, and what not.",
    },
    {
        "id": "d-2026-11-17",
        "title": "Week 46: serving on CPUs",
        "published_at": "2026-11-17T08:00:00Z",
        "url": "https://radar.example/digests/d-2026-11-17",
        "summary": "llama.cpp and onnxruntime on two cores.",
    },
]


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    def routes(app: Flask, caller) -> None:
        @app.get("/v1/digests")
        def digests():
            who = caller()
            require_group(who, READERS)
            limit = request.args.get("limit", "3")
            if not limit.isdigit() or not 1 <= int(limit) <= 10:
                abort(400)
            visible = [d for d in DIGESTS if STAFF in who.groups or not d.get("internal")]
            return jsonify(digests=[{k: v for k, v in d.items() if k != "internal"} for d in visible[: int(limit)]])

    return dev_upstream_app("radar_latest", env, routes)
