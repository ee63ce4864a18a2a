"""A database outage under concurrent writes: 503 problems meanwhile, recovery by itself, nothing acknowledged lost."""

import shutil
import threading
import time

import pytest
import requests

from agentfn.devstack.harness.postgres import Postgres, postgres_dir
from agentfn.devstack.harness.servers import Client, Gunicorn


@pytest.fixture
def own_database(tmp_path, issuer):
    """A Postgres and a memory function of this test's own, so stopping the database disturbs no other test."""

    root = postgres_dir()
    pg = Postgres(root / "data")
    pg.start()
    env = {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": pg.provision("memory", "agentfn_memory"),
        "AGENTFN_MEMORY_WRITES_PER_MINUTE": "100000",
    }  # the writers write as fast as they can
    server = Gunicorn("agentfn.memory.app:create_app()", env, tmp_path / "memory.log")
    server.start()
    yield pg, server
    server.stop()
    pg.stop("immediate")
    shutil.rmtree(root, ignore_errors=True)


def test_postgres_restart_loses_nothing_acknowledged(own_database, issuer):
    pg, server = own_database
    acknowledged, refused, unexpected = [], [], []
    stop = threading.Event()

    def writer(n):
        client = Client(server.url, issuer.headers(f"writer-{n}"))
        i = 0
        while not stop.is_set():
            i += 1
            try:
                r = client.post("/v1/entries", json={"kind": "fact", "text": f"note {n}-{i}", "source": "outage test"})
            except requests.RequestException as e:
                unexpected.append(type(e).__name__)
                continue
            if r.status_code == 201:
                acknowledged.append((n, r.json()["id"]))
            elif r.status_code == 503 and r.headers["Content-Type"] == "application/problem+json":
                refused.append(n)
            else:
                unexpected.append(r.status_code)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    before_outage = len(acknowledged)
    pg.stop("fast")
    time.sleep(0.5)
    assert requests.get(server.url + "/readyz", timeout=10).status_code == 503
    time.sleep(1.0)
    during_outage = len(refused)
    pg.start()
    deadline = time.monotonic() + 20
    while requests.get(server.url + "/readyz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "memory did not recover after the database came back"
        time.sleep(0.1)
    recovered_at = len(acknowledged)
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(30)

    assert before_outage > 0 and during_outage > 0
    assert len(acknowledged) > recovered_at, "no write succeeded after recovery"
    assert unexpected == []
    for n in range(4):
        listed = Client(server.url, issuer.headers(f"writer-{n}")).get("/v1/entries", params={"limit": 1000})
        kept = {e["id"] for e in listed.json()["entries"]}
        assert {i for w, i in acknowledged if w == n} <= kept
