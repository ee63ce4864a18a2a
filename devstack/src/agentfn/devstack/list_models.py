"""TEST DOUBLE of the model service's tier catalogue (outside this project), for the dev stack and the tests.

It speaks the contract in `upstream.md`, takes only a token exchanged for it (audience `agentfn:upstream:list_models`,
actor its read tool), verified with `agentfn.shared.identity` as the real service would, and lists the tiers each
caller's groups allow: readers are `platform-users` and `research`; only `research` sees the `deep` tier.
`flask --app 'agentfn.devstack.list_models:create_app()' run -h 127.0.0.1` (loopback only).

Configuration: `DevUpstreamSettings` (agentfn.devstack.upstream; docs/configuration.md), and identity's.
"""

from __future__ import annotations

from collections.abc import Mapping

from flask import Flask, jsonify

from .upstream import dev_upstream_app, require_group

READERS = {"platform-users", "research"}
RESEARCH = "research"

PUBLIC = [
    {
        "name": "fast",
        "engine": "vllm",
        "model": "Qwen3-8B-AWQ",
        "context_tokens": 32768,
        "deadline_seconds": 30,
        "embeds": True,
        "embedding_model": "Qwen3-Embedding-0.6B",
    },
    {
        "name": "embed",
        "engine": "onnxruntime",
        "model": "multilingual-e5-small",
        "context_tokens": 512,
        "deadline_seconds": 5,
        "embeds": True,
        "embedding_model": "multilingual-e5-small",
    },
]
DEEP = {
    "name": "deep",
    "engine": "llama.cpp",
    "model": "Qwen3-32B-Q4_K_M",
    "context_tokens": 131072,
    "deadline_seconds": 120,
    "embeds": False,
}


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    def routes(app: Flask, caller) -> None:
        @app.get("/v1/tiers")
        def tiers():
            who = caller()
            require_group(who, READERS)
            return jsonify(tiers=PUBLIC + ([DEEP] if RESEARCH in who.groups else []))

    return dev_upstream_app("list_models", env, routes)
