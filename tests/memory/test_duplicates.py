"""A note is kept once per subject: the same note again is answered with the entry that says it, never a new row."""

import secrets
import threading

import pytest
import requests

from agentfn.devstack.harness.servers import Client

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"
NOTE = "Answer me in one short sentence."


def post(client, text, kind="preference"):
    return client.post("/v1/entries", json={"kind": kind, "text": text, "source": "chat"})


@pytest.mark.parametrize(
    "again",
    [
        NOTE,
        "answer me in one short sentence",  # case, the closing full stop
        "  Answer   me in one\tshort sentence!  ",  # runs of whitespace, other closing punctuation
        "Ａｎｓｗｅｒ me in one short sentence.",  # full-width letters (NFKC)
        "Answer\u00a0me in one short sentence…",  # a no-break space, an ellipsis
    ],
)
def test_the_same_note_again_is_the_existing_entry(caller, again):
    first = post(caller, NOTE)
    assert first.status_code == 201 and first.json()["existing"] is False
    response = post(caller, again, kind="fact")  # of any kind: a preference and a fact saying one thing are one note
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["existing"] is True
    assert {k: body[k] for k in ("id", "kind", "text")} == {"id": first.json()["id"], "kind": "preference", "text": NOTE}
    assert [e["id"] for e in caller.get("/v1/entries").json()["entries"]] == [first.json()["id"]]


@pytest.mark.parametrize(
    "other",
    [
        "Answer me in one short sentence, please.",
        "Answer me in two short sentences.",
        "I use C#.",
        "Odgovaraj mi u jednoj kratkoj rečenici.",
    ],
)
def test_a_different_note_is_kept(caller, other):
    assert post(caller, NOTE if other != "I use C#." else "I use C.").status_code == 201
    response = post(caller, other)
    assert response.status_code == 201 and response.json()["existing"] is False
    assert len(caller.get("/v1/entries").json()["entries"]) == 2


def test_notes_are_compared_within_a_subject_and_never_with_episodes(memory, issuer, caller):
    other = Client(memory.url, issuer.headers(f"other-{secrets.token_hex(3)}"))
    assert post(caller, NOTE).status_code == 201
    assert post(other, NOTE).status_code == 201
    subject = f"ana-{secrets.token_hex(3)}"
    ana = Client(memory.url, issuer.headers(subject))
    episode = requests.post(
        memory.url + "/internal/v1/episodes",
        json={"subject": subject, "text": NOTE},
        timeout=30,
        headers={"Authorization": f"Bearer {issuer.service_token(MODEL_SERVICE)}"},
    )
    assert episode.status_code == 201
    assert post(ana, NOTE).status_code == 201  # an episode is a session's summary, not a note of the person's
    assert sorted(e["kind"] for e in ana.get("/v1/entries").json()["entries"]) == ["episode", "preference"]


def test_concurrent_identical_writes_keep_one_row(caller):
    statuses, ids, barrier = [], [], threading.Barrier(8)

    def write():
        barrier.wait()
        response = post(caller, NOTE)
        statuses.append(response.status_code)
        ids.append(response.json()["id"])

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(statuses) == [200] * 7 + [201]
    assert len(set(ids)) == 1
    assert [e["id"] for e in caller.get("/v1/entries").json()["entries"]] == ids[:1]


def test_a_correction_into_another_entrys_note_is_a_conflict(caller):
    first = post(caller, NOTE).json()
    second = post(caller, "Use tabs in Go code.").json()
    response = caller.patch(f"/v1/entries/{second['id']}", json={"text": "answer me in one short sentence"})
    assert response.status_code == 409, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "https://agentfn.dev/problems/duplicate-note" and problem["status"] == 409
    assert problem["entry_id"] == first["id"] and first["id"] in problem["detail"] and "forget" in problem["detail"]
    assert {e["id"]: e["text"] for e in caller.get("/v1/entries").json()["entries"]} == {
        first["id"]: NOTE,
        second["id"]: "Use tabs in Go code.",
    }
    # Correcting an entry into its own note (case, punctuation) is a correction, not a duplicate.
    own = caller.patch(f"/v1/entries/{first['id']}", json={"text": "Answer me in ONE short sentence!"})
    assert own.status_code == 200 and own.json()["text"] == "Answer me in ONE short sentence!"
