"""Forgetting is deletion: after a forget, no table anywhere holds the entry's text, vector or id."""

import datetime
import json
import re
import secrets
import threading
import time
import uuid
from pathlib import Path

import jwt
import psycopg
import pytest
import requests

from agentfn.devstack.harness.servers import Client


def scan(admin_dsn, needles):
    """Every row of every user table in the database, as text, searched for each needle."""
    hits = []
    with psycopg.connect(admin_dsn) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        assert ("memory", "entries") in tables
        for schema, table in tables:
            for needle in needles:
                found = conn.execute(
                    f'SELECT count(*) FROM "{schema}"."{table}" t WHERE strpos(row_to_json(t)::text, %s) > 0', (needle,)
                ).fetchone()[0]
                if found:
                    hits.append((schema, table, needle[:20]))
    return hits


def test_forget_leaves_nothing_behind(caller, postgres):
    text = "The launch code of the staging cluster is in vault path kv/staging-7791."
    entry = caller.post("/v1/entries", json={"kind": "fact", "text": text, "source": "chat"}).json()
    caller.patch(f"/v1/entries/{entry['id']}", json={"source": "corrected chat"})
    with psycopg.connect(postgres.admin_dsn) as conn:
        vector = conn.execute("SELECT embedding::text FROM memory.entries WHERE id = %s", (entry["id"],)).fetchone()[0]
    needles = [text, vector, entry["id"]]
    assert scan(postgres.admin_dsn, needles)  # the scan finds it while it is kept

    assert caller.delete(f"/v1/entries/{entry['id']}").status_code == 204
    assert scan(postgres.admin_dsn, needles) == []


# Forgetting everything: DELETE /v1/entries with the confirmation phrase.
MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"
PHRASE = {"confirm": "forget everything"}
NOTES = [
    ("fact", "Maintains the billing exporter in the payments team."),
    ("fact", "The ledger service runs on Postgres seventeen."),
    ("preference", "Prefers answers in Croatian with examples in Go."),
]
EPISODE = "Vesna asked how to page the on-call engineer and chose the incident channel for urgent pages."


def keep_some(caller, memory, issuer):
    """Two facts, a preference and an episode of the caller: their ids."""
    ids = [caller.post("/v1/entries", json={"kind": k, "text": t, "source": "chat"}).json()["id"] for k, t in NOTES]
    subject = jwt.decode(caller.session.headers["Authorization"][7:], options={"verify_signature": False})["sub"]
    episode = requests.post(
        memory.url + "/internal/v1/episodes",
        json={"subject": subject, "text": EPISODE},
        timeout=30,
        headers={"Authorization": f"Bearer {issuer.service_token(MODEL_SERVICE)}"},
    )
    assert episode.status_code == 201, episode.text
    return ids + [episode.json()["id"]]


def test_forget_all_deletes_every_entry_of_the_caller_and_answers_a_receipt(caller, memory, issuer, postgres):
    ids = keep_some(caller, memory, issuer)
    other = Client(memory.url, issuer.headers(f"other-{secrets.token_hex(4)}"))
    theirs = other.post(
        "/v1/entries", json={"kind": "fact", "text": "Runs the nightly backup of the ledger.", "source": "chat"}
    ).json()
    with psycopg.connect(postgres.admin_dsn) as conn:
        vectors = [
            v
            for (v,) in conn.execute(
                "SELECT embedding::text FROM memory.entries WHERE id = ANY(%s)", ([uuid.UUID(i) for i in ids],)
            ).fetchall()
        ]
    needles = [t for _, t in NOTES] + [EPISODE] + vectors + ids
    assert len(vectors) == 4 and len(scan(postgres.admin_dsn, needles)) == len(needles)  # the scan finds each

    before = datetime.datetime.now(datetime.UTC)
    answer = caller.delete("/v1/entries", json=PHRASE)
    assert answer.status_code == 200, answer.text
    receipt = answer.json()
    assert receipt["deleted"] == {"fact": 2, "preference": 1, "episode": 1} and receipt["total"] == 4
    at = datetime.datetime.fromisoformat(receipt["at"])
    assert before - datetime.timedelta(seconds=5) <= at <= datetime.datetime.now(datetime.UTC)
    assert set(receipt) == {"deleted", "total", "at", "stays"} and not any(t in answer.text for t in (*needles, "chat"))

    assert caller.get("/v1/entries").json()["entries"] == []
    assert caller.post("/v1/recall", json={"query": "Who maintains the billing exporter?"}).json()["entries"] == []
    # Rows and vectors are gone from every table; another subject's entry is not.
    assert scan(postgres.admin_dsn, needles) == []
    assert [e["id"] for e in other.get("/v1/entries").json()["entries"]] == [theirs["id"]]
    again = caller.delete("/v1/entries", json=PHRASE).json()
    assert again["deleted"] == {"fact": 0, "preference": 0, "episode": 0} and again["total"] == 0
    # The log says who (hashed) forgot how many, never what.
    subject = jwt.decode(caller.session.headers["Authorization"][7:], options={"verify_signature": False})["sub"]
    hashed = issuer.subject_hash(subject)
    time.sleep(0.3)  # the last lines are flushed
    lines = [json.loads(line) for line in memory.log.read_text().splitlines() if line.startswith("{")]
    events = [
        (r["count"], r["request_id"]) for r in lines if r.get("event") == "forget_all" and r.get("subject_hash") == hashed
    ]
    assert [count for count, _ in events] == [4, 0] and events[0][1] == answer.headers["X-Request-Id"]
    log = memory.log.read_text()
    assert subject not in log and not any(n in log for n in needles)


def test_forget_all_waits_for_a_write_under_way_and_forgets_it_too(caller, memory, memory_env, issuer):
    ids = keep_some(caller, memory, issuer)
    subject = jwt.decode(caller.session.headers["Authorization"][7:], options={"verify_signature": False})["sub"]
    answers = []
    with psycopg.connect(memory_env["AGENTFN_DATABASE_URL"], options="-c search_path=memory,public") as conn:
        # A write under way, as memory makes one: the subject's quota row locked, then the row inserted.
        conn.execute("SELECT set_config('agentfn.subject', %s, true)", (subject,))
        conn.execute("SELECT 1 FROM quotas WHERE subject = %s FOR UPDATE", (subject,))
        conn.execute(
            "INSERT INTO entries (id, subject, kind, text, source, model, embedding) SELECT %s, subject, "
            "'fact', 'Written while forgetting.', 'test', model, embedding FROM entries WHERE id = %s",
            (uuid.uuid4(), ids[0]),
        )
        forgetting = threading.Thread(target=lambda: answers.append(caller.delete("/v1/entries", json=PHRASE)))
        forgetting.start()
        forgetting.join(1.5)
        assert forgetting.is_alive()  # it waits for the write
        conn.commit()
    forgetting.join(30)
    assert answers[0].status_code == 200 and answers[0].json()["total"] == len(ids) + 1
    assert caller.get("/v1/entries").json()["entries"] == []


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (None, 422),
        ({}, 422),
        ({"confirm": "forget all"}, 422),
        ({"confirm": "Forget everything"}, 422),
        ({"confirm": "forget everything "}, 422),
        ({"confirm": "forget everything", "kind": "fact"}, 422),
        ({"confirm": True}, 422),
        (["forget everything"], 422),
        ("forget everything", 422),
        (b"forget everything", 415),
        (b"{not json", 400),
    ],
    ids=[
        "no_body",
        "empty",
        "other_words",
        "capitalised",
        "trailing_space",
        "extra_field",
        "boolean",
        "list",
        "string",
        "not_json_type",
        "bad_json",
    ],
)
def test_forget_all_without_the_exact_phrase_is_refused_and_forgets_nothing(caller, memory, issuer, body, status):
    ids = keep_some(caller, memory, issuer)
    if isinstance(body, bytes):
        headers = {"Content-Type": "application/json" if status == 400 else "text/plain"}
        answer = caller.delete("/v1/entries", data=body, headers=headers)
    else:
        answer = caller.delete("/v1/entries", json=body) if body is not None else caller.delete("/v1/entries")
    assert answer.status_code == status, answer.text
    problem = answer.json()
    assert answer.headers["Content-Type"] == "application/problem+json" and problem["status"] == status
    if status == 422:
        assert problem["type"] == "https://agentfn.dev/problems/confirm-forget-all"
        assert '{"confirm": "forget everything"}' in problem["detail"] and "Nothing was forgotten" in problem["detail"]
    assert sorted(e["id"] for e in caller.get("/v1/entries").json()["entries"]) == sorted(ids)


def test_forget_all_needs_a_caller_token(memory, issuer):
    assert requests.delete(memory.url + "/v1/entries", json=PHRASE, timeout=30).status_code == 401
    service = {"Authorization": f"Bearer {issuer.service_token(MODEL_SERVICE)}"}
    assert requests.delete(memory.url + "/v1/entries", json=PHRASE, headers=service, timeout=30).status_code == 401


# What forgetting everything leaves: every record of any part that names the subject, and why it stays.
MIGRATIONS = sorted(Path(__file__).resolve().parents[2].glob("src/agentfn/*/migrations/*.sql"))
TABLE = re.compile(r"CREATE TABLE (\w+) \((.*?)\n\);", re.S)
ADDED = re.compile(r"ALTER TABLE (\w+) ADD COLUMN subject\b")


def tables_naming_a_subject() -> set[str]:
    """`schema.table` of every table any part's migrations make with a `subject` column (schema: the part's)."""
    found = set()
    for path in MIGRATIONS:
        for table, columns in TABLE.findall(path.read_text()):
            if re.search(r"^\s*subject\s", columns, re.M):
                found.add(f"{path.parent.parent.name}.{table}")
        found |= {f"{path.parent.parent.name}.{table}" for table in ADDED.findall(path.read_text())}
    return found


def test_the_receipt_says_what_stays_and_why(caller, memory, issuer, postgres):
    keep_some(caller, memory, issuer)
    subject = jwt.decode(caller.session.headers["Authorization"][7:], options={"verify_signature": False})["sub"]
    answer = caller.delete("/v1/entries", json=PHRASE)
    assert answer.status_code == 200, answer.text
    receipt = answer.json()
    assert receipt["total"] == 4 and subject not in answer.text
    stays = receipt["stays"]
    assert all(set(item) == {"part", "record", "holds", "why", "until"} for item in stays)
    assert all(isinstance(v, str) and len(v) > 3 for item in stays for v in item.values())
    records = {item["record"] for item in stays}
    # Every record that names a person, in every part, is either deleted (the entries) or said to stay, with why.
    assert {"memory.entries", "memory.quotas", "model.generations", "page.audit"} <= tables_naming_a_subject()
    assert records - {"logs and traces"} == tables_naming_a_subject() - {"memory.entries"}
    assert "logs and traces" in records
    # And what the database still holds of the subject after it is only what the receipt names.
    left = {f"{schema}.{table}" for schema, table, _ in scan(postgres.admin_dsn, [subject])}
    assert left and left <= records, left
