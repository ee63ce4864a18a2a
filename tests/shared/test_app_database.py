"""A function that hands its store to the app factory gets the database's readiness check and its outage problem
from there: /readyz says whether the database answers, and a door that cannot reach it answers 503, never 500."""

from __future__ import annotations

import psycopg
import pytest
from flask import jsonify

from agentfn.devstack.harness.ports import free_port
from agentfn.run_code.store import Store
from agentfn.shared import app as http


def served(dsn: str):
    store = Store(dsn, pool_size=1)
    app = http.create_app("agentfn.demo", openapi={}, readiness={}, identity=None, database=store)

    @app.get("/v1/reach")
    def reach():
        with store.pool.connection(timeout=1) as conn:
            # The table the migrations made: the door reached the function's own schema.
            return jsonify(reached=conn.execute("SELECT count(*) >= 0 FROM daily_runs").fetchone()[0])

    return store, app.test_client()


def down() -> str:
    return f"postgresql://nobody:nothing@127.0.0.1:{free_port()}/nowhere"  # a loopback port nothing listens on


CASES = [
    ("database up: ready", "up", "/readyz", 200, {"ready": True, "checks": {"database": True}}),
    ("database up: the door answers", "up", "/v1/reach", 200, {"reached": True}),
    ("database down: not ready", "down", "/readyz", 503, {"ready": False, "checks": {"database": False}}),
    (
        "database down: the door answers a problem",
        "down",
        "/v1/reach",
        503,
        {
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "the demo database is not answering; try again shortly",
        },
    ),
]


@pytest.mark.parametrize(("case", "state", "path", "status", "body"), CASES, ids=[c[0] for c in CASES])
def test_the_app_factory_owns_the_database_check_and_outage(request, case, state, path, status, body):
    dsn = request.getfixturevalue("postgres").provision("run_code", "agentfn_run_code") if state == "up" else down()
    store, client = served(dsn)
    try:
        if path != "/readyz":
            client.get("/readyz")  # migrated first, as a ready function is
        answer = client.get(path)
        got = {k: v for k, v in answer.get_json().items() if k != "request_id"}
        assert (answer.status_code, got) == (status, body), answer.get_data(as_text=True)
        if status == 503 and path != "/readyz":
            assert answer.mimetype == "application/problem+json"
    finally:
        store.close()


def test_a_connection_the_database_ended_while_pooled_is_not_handed_to_a_door(postgres):
    """A backend ended while its connection sat in the pool (a restart, an admin's terminate): the next request gets
    a working connection, not a 503. The pool's check reads the connection's socket and asks the server only then."""
    store, client = served(postgres.provision("run_code", "agentfn_run_code"))
    try:
        assert client.get("/v1/reach").status_code == 200
        with store.pool.connection() as conn:  # the pool's one connection
            ended = conn.info.backend_pid
        with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (ended,)).fetchone()[0]
        answers = [client.get("/v1/reach").status_code for _ in range(3)]
        with store.pool.connection() as conn:
            assert conn.info.backend_pid != ended
        assert answers == [200, 200, 200]
    finally:
        store.close()
