"""Memory keeps notes, not junk: one table of texts, tried at every door that writes a text."""

import secrets

import pytest
import requests

from agentfn.devstack.harness.servers import Client

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"
NOT_A_NOTE = "https://agentfn.dev/problems/not-a-note"
BLANK = "blank"  # refused by the schema or by the guard, whichever sees it first

# (text, None when it is a note and kept, else the words the refusal's detail says)
CASES = [
    ("Answer me in one short sentence.", None),
    ("Odgovaraj mi kratko, na hrvatskom.", None),
    ("I prefer Python 3.12 over 3.11.", None),
    ("My team's port is 8080.", None),
    ("Moja mačka se zove Luna.", None),
    ("The staging cluster's id is 46303f0d.", None),
    ("42 is my lucky number.", None),
    ("Port 8080", None),
    ("Deploys go out at 14:00 on Tuesdays.", None),
    ("I debug with print(), not with a debugger.", None),
    ("ls shows hidden files with -a.", None),
    ("cd into the repo before running ./dev test", None),
    ("Prefer `git rebase` over merge commits.", None),
    ("Uvijek koristi `uv pip install` umjesto pip.", None),
    ("For reviews:\n  - be short\n  - cite the line", None),
    ("我喜欢简短的回答。", None),
    ("Editor = Helix", None),
    ("46303f0d-d6ae-432b-b8c4-4ae4239b20a7", "only an id"),
    ("{46303F0D-D6AE-432B-B8C4-4AE4239B20A7}", "only an id"),
    ("46303f0d", "only an id"),
    ("id: 3f2a", "only an id"),
    ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "only an id"),
    ("42", "only a number"),
    ("3.14 ms", "only a number"),
    ("1,000,000", "only a number"),
    ("-12.5%", "only a number"),
    ("6 * 7 = 42", "only a number"),
    ("2026-12-01", "only a number"),
    ("print(6 * 7)", "only code"),
    ("x = 1", "only code"),
    ("os.getcwd()", "only code"),
    ("rm -rf /tmp/x", "only code"),
    ("kubectl get pods -n agentfn", "only code"),
    ("sudo apt-get install vim", "only code"),
    ("def double(x):\n    return x * 2", "only code"),
    ("import os", "only code"),
    ("SELECT * FROM entries;", "only code"),
    ("```python\nx=1\n```", "only code"),
    ('{"a": 1}', "only JSON data"),
    ("[1, 2, 3]", "only JSON data"),
    ("...", "no words"),
    ("   ", BLANK),
    ("\u00a0\u2003\u200b", BLANK),
]
IDS = [repr(text)[1:31] for text, _ in CASES]


def check(response, expected, kept_status):
    if expected is None:
        assert response.status_code == kept_status, response.text
        return
    assert response.status_code == 422, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == 422 and problem["title"] and problem["request_id"]
    if expected == BLANK:
        assert problem["detail"].startswith("text")
    else:
        assert problem["type"] == NOT_A_NOTE and problem["title"] == "Not a note"
        assert expected in problem["detail"] and "a sentence a person could have said" in problem["detail"]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=IDS)
def test_a_new_entry_must_be_a_note(caller, text, expected):
    response = caller.post("/v1/entries", json={"kind": "preference", "text": text, "source": "chat"})
    check(response, expected, 201)
    listed = caller.get("/v1/entries").json()["entries"]
    assert [e["text"] for e in listed] == ([text] if expected is None else [])


@pytest.mark.parametrize(("text", "expected"), CASES, ids=IDS)
def test_a_correction_must_be_a_note(caller, text, expected):
    entry = caller.post("/v1/entries", json={"kind": "fact", "text": "The ledger listens on 7311.", "source": "chat"})
    response = caller.patch(f"/v1/entries/{entry.json()['id']}", json={"text": text})
    check(response, expected, 200)
    (kept,) = caller.get("/v1/entries").json()["entries"]
    assert kept["text"] == (text if expected is None else "The ledger listens on 7311.")


@pytest.mark.parametrize(("text", "expected"), CASES, ids=IDS)
def test_an_episode_must_be_a_note(memory, issuer, text, expected):
    subject = f"ana-{secrets.token_hex(3)}"
    response = requests.post(
        memory.url + "/internal/v1/episodes",
        json={"subject": subject, "text": text},
        timeout=30,
        headers={"Authorization": f"Bearer {issuer.service_token(MODEL_SERVICE)}"},
    )
    check(response, expected, 201)
    listed = Client(memory.url, issuer.headers(subject)).get("/v1/entries").json()["entries"]
    assert len(listed) == (1 if expected is None else 0)
