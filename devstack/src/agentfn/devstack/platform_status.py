"""TEST DOUBLE of the arena status service (outside this project), for the dev stack and the tests.

It speaks the contract in `upstream.md`, takes only a token exchanged for it (audience
`agentfn:upstream:platform_status`, actor its read tool), verified with `agentfn.shared.identity` as the real service
would, and shows each caller what its groups allow: readers are `platform-users` and `platform-ops`; only
`platform-ops` sees the internal services and the incidents.
`flask --app 'agentfn.devstack.platform_status:create_app()' run -h 127.0.0.1` (loopback only).

Configuration: `DevUpstreamSettings` (agentfn.devstack.upstream; docs/configuration.md), and identity's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from flask import Flask, jsonify

from .upstream import dev_upstream_app, require_group

READERS = {"platform-users", "platform-ops"}
OPS = "platform-ops"

PUBLIC = [
    {"name": "llm", "state": "up", "latency_ms": 180, "note": "all tiers serving"},
    {"name": "radar", "state": "degraded", "latency_ms": 2400, "note": "digests published late"},
    {"name": "workbench", "state": "up", "latency_ms": 95, "note": None},
    {"name": "gateway", "state": "up", "latency_ms": 12, "note": None},
]
INTERNAL = [
    {"name": "postgres", "state": "up", "latency_ms": 3, "note": "replica lag 40 ms"},
    {"name": "operator", "state": "down", "latency_ms": None, "note": "leader election failing"},
]
INCIDENTS = [
    {"id": "inc-42", "title": "Operator leader election failing", "since": "2026-12-02T09:10:00Z", "service": "operator"},
]


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    def routes(app: Flask, caller) -> None:
        @app.get("/v1/snapshot")
        def snapshot():
            who = caller()
            require_group(who, READERS)
            ops = OPS in who.groups
            return jsonify(
                taken_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                services=PUBLIC + (INTERNAL if ops else []),
                queue={"waiting": 3, "running": 2},
                incidents=INCIDENTS if ops else [],
            )

    return dev_upstream_app("platform_status", env, routes)
