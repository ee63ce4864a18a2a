"""The memory function's app factory: `gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.memory.app:create_app()'`.

Configuration (environment), besides identity's (`agentfn.shared.identity`) and the embedder's
(`agentfn.memory.embedder`):

| name | default | meaning |
|---|---|---|
| `AGENTFN_DATABASE_URL` | (required) | DSN of memory's own role; its schema is `memory` |
| `AGENTFN_RECALL_MAX_TOKENS` | `1000` | token cap of one recall, counted with the model's tokenizer |
| `AGENTFN_MAX_REQUEST_BYTES` | `65536` | larger bodies get 413 |
| `AGENTFN_DB_POOL_SIZE` | `4` | connections per process |
| `AGENTFN_MEMORY_MAX_ENTRIES` | `2000` | entries a subject keeps, of every kind; then 429 until some are forgotten |
| `AGENTFN_MEMORY_WRITES_PER_MINUTE` | `60` | writes (POST, PATCH) per subject per minute, in bursts of as many; then 429 |
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agentfn.shared import app as http
from agentfn.shared.identity import Identity
from flask import Flask

from . import embedder as embedding
from .memory import Memory
from .quotas import Limits, QuotaSpent
from .routes import bp
from .schemas import openapi
from .store import Store


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    model = embedding.open_embedder(embedding.config_from_env(env))
    store = Store(env["AGENTFN_DATABASE_URL"], pool_size=int(env.get("AGENTFN_DB_POOL_SIZE", "4")))

    app = http.create_app(
        "agentfn.memory",
        openapi=openapi(model.config.name),
        database=store,
        readiness={"model": model.ready},
        identity=Identity.from_env(env, audience="agentfn:memory"),
        max_request_bytes=int(env.get("AGENTFN_MAX_REQUEST_BYTES", str(http.DEFAULT_MAX_BYTES))),
    )
    app.extensions["agentfn.memory"] = Memory(
        store, model, max_tokens=int(env.get("AGENTFN_RECALL_MAX_TOKENS", "1000")), limits=Limits.from_env(env)
    )

    @app.errorhandler(QuotaSpent)
    def quota_spent(problem: QuotaSpent):
        response = http.problem_response(problem)
        response.headers["Retry-After"] = str(problem.retry_after)
        return response

    app.register_blueprint(bp)
    return app
