"""Two replicas starting at once on an empty database: both become ready, each migration is applied once."""

import threading

import psycopg
import pytest
from psycopg import sql

from agentfn.devstack.harness.servers import Client, Gunicorn


@pytest.fixture
def empty_database(postgres):
    name = "replicas"
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin = postgres.admin_dsn.rsplit("/", 1)[0] + f"/{name}"
    from agentfn.shared import db

    db.provision(admin, schema="memory", role="agentfn_memory_replicas", password="replica-pw")
    yield admin, postgres.dsn("agentfn_memory_replicas", "replica-pw").rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.slow  # two replicas of memory under gunicorn
def test_two_replicas_migrate_once(empty_database, issuer, tmp_path):
    admin, dsn = empty_database
    env = {**issuer.env(), "AGENTFN_DATABASE_URL": dsn}
    replicas = [Gunicorn("agentfn.memory.app:create_app()", env, tmp_path / f"replica-{n}.log") for n in range(2)]
    errors = []

    def start(server):
        try:
            server.start()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=start, args=(r,)) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    try:
        assert errors == []
        with psycopg.connect(admin) as conn:
            applied = conn.execute("SELECT version, count(*) FROM memory.schema_migrations GROUP BY version").fetchall()
        assert applied and all(count == 1 for _, count in applied)
        a = Client(replicas[0].url, issuer.headers("replica-user"))
        b = Client(replicas[1].url, issuer.headers("replica-user"))
        kept = a.post("/v1/entries", json={"kind": "fact", "text": "Replicas share one store.", "source": "s"}).json()
        assert [e["id"] for e in b.get("/v1/entries").json()["entries"]] == [kept["id"]]
    finally:
        for r in replicas:
            r.stop()
