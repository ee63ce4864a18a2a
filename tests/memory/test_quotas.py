"""Quotas per subject: a cap on entries and a write rate, 429 problems with Retry-After; refused writes change nothing."""

import secrets
import threading
import time

import psycopg
import pytest
import requests

from agentfn.devstack.harness.servers import Client, Gunicorn

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"
CAP, RATE = 4, 20  # a write comes back every 60 / RATE = 3 s


@pytest.fixture(scope="module")
def limited(memory_env, tmp_path_factory):
    """memory with small quotas, on the same database as the other tests (their subjects are their own)."""
    env = {**memory_env, "AGENTFN_MEMORY_MAX_ENTRIES": str(CAP), "AGENTFN_MEMORY_WRITES_PER_MINUTE": str(RATE)}
    server = Gunicorn("agentfn.memory.app:create_app()", env, tmp_path_factory.mktemp("limited") / "memory.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def quota_person(limited, issuer):
    """A fresh subject's client on the limited memory; `.subject` names it."""

    def make():
        subject = f"quota-{secrets.token_hex(4)}"
        client = Client(limited.url, issuer.headers(subject))
        client.subject = subject
        return client

    return make


def post(client, text):
    return client.post("/v1/entries", json={"kind": "fact", "text": text, "source": "chat"})


def episode(server, issuer, subject, text="Ana and the reviewer went through the ledger's deploy steps."):
    return requests.post(
        server.url + "/internal/v1/episodes",
        json={"subject": subject, "text": text},
        timeout=30,
        headers={"Authorization": f"Bearer {issuer.service_token(MODEL_SERVICE)}"},
    )


def assert_quota_problem(response, kind, limit):
    assert response.status_code == 429, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == f"https://agentfn.dev/problems/{kind}"
    assert problem["title"] == "Too Many Requests" and problem["status"] == 429 and problem["limit"] == limit
    assert problem["detail"] and problem["request_id"]
    return int(response.headers["Retry-After"]), problem["detail"]


def test_the_entry_cap_refuses_new_entries_until_some_are_forgotten(quota_person):
    ana, bob = quota_person(), quota_person()
    kept = [post(ana, f"Note number {n} is about the ledger.").json() for n in range(CAP)]
    before = ana.get("/v1/entries").json()

    retry, detail = assert_quota_problem(post(ana, "One note too many."), "entry-cap", CAP)
    assert retry >= 60 and "forget" in detail and str(CAP) in detail
    assert ana.get("/v1/entries").json() == before
    # A note already kept is still answered (nothing new is kept); another subject is unaffected.
    assert post(ana, kept[0]["text"]).status_code == 200
    assert post(bob, "One note too many.").status_code == 201

    assert ana.delete(f"/v1/entries/{kept[0]['id']}").status_code == 204
    assert post(ana, "One note too many.").status_code == 201
    assert len(ana.get("/v1/entries").json()["entries"]) == CAP


def test_an_episode_counts_against_the_cap(limited, issuer):
    subject = f"quota-{secrets.token_hex(4)}"
    for n in range(CAP):
        assert episode(limited, issuer, subject, f"Session {n}: Ana planned the ledger's deploy.").status_code == 201
    assert_quota_problem(episode(limited, issuer, subject), "entry-cap", CAP)
    ana = Client(limited.url, issuer.headers(subject))
    assert_quota_problem(post(ana, "A note after the episodes."), "entry-cap", CAP)
    assert len(ana.get("/v1/entries").json()["entries"]) == CAP


def test_concurrent_writes_never_pass_the_cap(quota_person):
    ana = quota_person()
    for n in range(CAP - 2):
        assert post(ana, f"Early note {n} about backups.").status_code == 201
    statuses, barrier = [], threading.Barrier(6)

    def write(n):
        barrier.wait()
        statuses.append(post(ana, f"Racing note {n} about the staging cluster.").status_code)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(statuses) == [201, 201, 429, 429, 429, 429]
    assert len(ana.get("/v1/entries").json()["entries"]) == CAP


def test_the_write_rate_refuses_then_resumes(limited, issuer, quota_person):
    ana, bob = quota_person(), quota_person()
    entry = post(ana, "The ledger listens on port 7311.").json()
    started, writes, refused = time.monotonic(), 1, None
    for n in range(RATE + 5):  # corrections embed too: they count
        response = ana.patch(f"/v1/entries/{entry['id']}", json={"text": f"The ledger listens on port {7312 + n}."})
        if response.status_code != 200:
            refused = response
            break
        writes += 1
    elapsed = time.monotonic() - started
    assert refused is not None
    # A burst of RATE writes, plus whatever the bucket refilled (one every 3 s) while they ran.
    assert RATE <= writes <= RATE + 1 + elapsed / (60 / RATE), (writes, elapsed)
    retry, detail = assert_quota_problem(refused, "write-rate", RATE)
    assert 1 <= retry <= 60 / RATE and f"{RATE} writes a minute" in detail

    kept = ana.get("/v1/entries").json()["entries"]
    assert_quota_problem(post(ana, "A new note while the rate is spent."), "write-rate", RATE)
    assert ana.get("/v1/entries").json()["entries"] == kept  # the refused correction and note changed nothing
    assert post(bob, "Bob's note is his own quota.").status_code == 201
    # The service door is not rate-limited: a session's summary is still kept.
    assert episode(limited, issuer, ana.subject).status_code == 201

    time.sleep(retry + 0.2)
    resumed = ana.patch(f"/v1/entries/{entry['id']}", json={"text": "The ledger listens on port 9000."})
    assert resumed.status_code == 200, resumed.text


def test_quota_rows_are_kept_apart_by_row_level_security(limited, memory_env, quota_person):
    ana, bob = quota_person(), quota_person()
    for who in (ana, bob):
        assert post(who, "A note that makes a quota row.").status_code == 201
    alice = ana.subject
    with psycopg.connect(memory_env["AGENTFN_DATABASE_URL"], options="-c search_path=memory,public") as conn:
        conn.execute("SELECT set_config('agentfn.subject', %s, true)", (alice,))
        assert [r[0] for r in conn.execute("SELECT subject FROM quotas")] == [alice]
        assert conn.execute("UPDATE quotas SET tokens = 1000 WHERE subject <> %s", (alice,)).rowcount == 0
