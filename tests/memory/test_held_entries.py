"""The entries a memory process holds between recalls (src/agentfn/memory/held.py): they serve a recall only while
the subject's entries are as they were loaded, whichever process changed them, and they stay within their bytes."""

import secrets
import time

import numpy as np
import psycopg
import pytest

from agentfn.devstack.harness.servers import Client
from agentfn.memory.held import Held, HeldEntries

QUESTION = "what is my dog called?"


@pytest.fixture
def held_subject(memory, issuer):
    subject = f"user-{secrets.token_hex(4)}"
    caller = Client(memory.url, issuer.headers(subject))
    for text in ("My dog is called Biscuit.", "The ledger service listens on port 8443.", "I live in Zagreb."):
        assert caller.post("/v1/entries", json={"kind": "fact", "text": text, "source": "chat"}).status_code == 201
    return subject, caller


def recalled(caller, by: str = "vector") -> list[str]:
    """The texts recall found by their vectors (or by their terms)."""
    response = caller.post("/v1/recall", json={"query": QUESTION})
    assert response.status_code == 200, response.text
    return [entry["text"] for entry in response.json()["entries"] if by in entry["matched"]]


def test_recall_sees_what_another_process_changed_at_once(held_subject, postgres):
    """Changed behind this memory's back (as another replica would, here with the database's admin role): a new
    entry, a changed vector and a changed text are recalled at the next recall, not the entries held since the last."""
    name, caller = held_subject
    assert recalled(caller) == ["My dog is called Biscuit."]  # Postgres ranked it, and memory loads the entries
    time.sleep(0.5)  # to hold them: loading three takes milliseconds
    assert recalled(caller) == ["My dog is called Biscuit."]  # ranked by memory
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:
        admin.execute(
            "INSERT INTO memory.entries (id, subject, kind, text, source, model, embedding) "
            "SELECT gen_random_uuid(), subject, kind, 'Our dog answers to Biscuit.', source, model, embedding "
            "FROM memory.entries WHERE subject = %s AND text LIKE 'My dog%%'",
            (name,),
        )
    assert sorted(recalled(caller)) == ["My dog is called Biscuit.", "Our dog answers to Biscuit."]

    with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:
        # Zagreb's entry takes the dog's vector, and the dog's two entries take the ledger's.
        admin.execute(
            "UPDATE memory.entries SET embedding = (SELECT embedding FROM memory.entries WHERE subject = %(s)s "
            "AND text LIKE 'My dog%%') WHERE subject = %(s)s AND text = 'I live in Zagreb.'",
            {"s": name},
        )
        admin.execute(
            "UPDATE memory.entries SET embedding = (SELECT embedding FROM memory.entries WHERE subject = %(s)s "
            "AND text LIKE 'The ledger%%') WHERE subject = %(s)s AND text LIKE '%%Biscuit.'",
            {"s": name},
        )
    assert recalled(caller) == ["I live in Zagreb."]
    assert recalled(caller, by="text") == ["My dog is called Biscuit."]  # "dog": the terms still match

    with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:
        admin.execute(
            "UPDATE memory.entries SET text = 'I live in Split.' WHERE subject = %s AND text LIKE '%%Zagreb%%'", (name,)
        )
    assert recalled(caller) == ["I live in Split."]


def test_each_statement_that_changes_entries_moves_each_of_its_subjects_version(postgres):
    one, two = (f"user-{secrets.token_hex(4)}" for _ in range(2))
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:

        def versions() -> dict:
            rows = admin.execute(
                "SELECT subject, version FROM memory.versions WHERE subject IN (%s, %s)", (one, two)
            ).fetchall()
            return dict(rows)

        admin.execute(
            "INSERT INTO memory.entries (id, subject, kind, text, source, model, embedding) "
            "SELECT gen_random_uuid(), s, 'fact', 'note ' || i, 'src', 'm', %s::halfvec "
            "FROM unnest(ARRAY[%s, %s, %s]) WITH ORDINALITY AS t(s, i)",
            (vector, one, one, two),
        )
        assert versions() == {one: 1, two: 1}
        admin.execute("UPDATE memory.entries SET source = 'x' WHERE subject = %s", (one,))
        assert versions() == {one: 2, two: 1}
        admin.execute("DELETE FROM memory.entries WHERE subject = %s AND text = 'nothing such'", (two,))
        assert versions() == {one: 2, two: 1}
        admin.execute("DELETE FROM memory.entries WHERE subject IN (%s, %s)", (one, two))
        assert versions() == {one: 3, two: 2}


def held(version: int, entries: int) -> Held:
    rows = [["fact", "note", "chat", None, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"]] * entries
    ids, vectors = np.zeros((entries, 16), np.uint8), np.eye(entries, 4, dtype=np.float32)
    return Held("m", version, ids, vectors, rows, np.array(["fact"] * entries), {}, 1000 * entries)


def test_held_entries_stay_within_their_bytes_the_least_recently_used_going_first():
    entries = HeldEntries(max_bytes=20_000)
    entries.put("ana", held(1, 10))
    entries.put("ivo", held(1, 10))
    assert entries.get("ana", "m", 1) is not None  # ana is now the more recently used
    entries.put("eva", held(1, 10))
    assert entries.get("ivo", "m", 1) is None
    assert entries.get("ana", "m", 1) is not None and entries.get("eva", "m", 1) is not None
    assert entries.get("ana", "m", 2) is None  # another version: not these entries

    entries.put("big", held(1, 30))
    assert entries.get("big", "m", 1) is None and not entries.holds("big", "m", 1)
    assert entries.holds("big", "m", 2)  # changed since: perhaps small enough now
    assert entries.get("ana", "m", 1) is not None  # nothing was dropped for entries that could never fit

    entries.drop("ana")
    assert entries.get("ana", "m", 1) is None


def test_held_entries_unused_for_a_while_are_dropped():
    entries = HeldEntries(max_bytes=2**20, idle=0.2)
    entries.put("ana", held(1, 10))
    entries.put("ivo", held(1, 10))
    time.sleep(0.1)
    assert entries.get("ivo", "m", 1) is not None
    time.sleep(0.15)
    assert entries.get("ana", "m", 1) is None  # 0.25 s unused
    assert entries.get("ivo", "m", 1) is not None  # used 0.15 s ago
