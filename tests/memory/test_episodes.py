"""WriteEpisode: only a trusted service keeps an episode, memory checks the rules again, recall shows its date."""

import datetime
import secrets

import pytest
import requests

from agentfn.devstack.harness.servers import Client

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"
SUMMARY = "Ana asked how to rotate the ledger's database password and decided to do it every ninety days."


@pytest.fixture
def episode_for(memory, issuer):
    headers = {"Authorization": f"Bearer {issuer.service_token(MODEL_SERVICE)}"}

    def write(subject, text=SUMMARY, **extra):
        return requests.post(
            memory.url + "/internal/v1/episodes",
            json={"subject": subject, "text": text, **extra},
            headers=headers,
            timeout=30,
        )

    return write


def test_a_trusted_service_keeps_an_episode_the_subject_then_recalls_with_its_date(memory, issuer, episode_for):
    subject = f"ana-{secrets.token_hex(3)}"
    written = episode_for(subject, session_id="s-42")
    assert written.status_code == 201, written.text
    episode = written.json()
    assert episode["kind"] == "episode" and episode["source"] == "session:s-42" and episode["session_id"] == "s-42"

    ana = Client(memory.url, issuer.headers(subject))
    assert [e["id"] for e in ana.get("/v1/entries", params={"kind": "episode"}).json()["entries"]] == [episode["id"]]
    recalled = ana.post("/v1/recall", json={"query": "How often do I rotate the ledger password?"}).json()["entries"]
    assert recalled[0]["id"] == episode["id"]
    assert recalled[0]["date"] == datetime.date.fromisoformat(episode["created_at"][:10]).isoformat()
    # Someone else sees nothing of it.
    other = Client(memory.url, issuer.headers(f"eve-{secrets.token_hex(3)}"))
    assert other.get("/v1/entries").json()["entries"] == []
    assert other.delete(f"/v1/entries/{episode['id']}").status_code == 404


def test_a_person_cannot_rewrite_an_episode_but_can_forget_it(memory, issuer, episode_for):
    subject = f"ana-{secrets.token_hex(3)}"
    episode = episode_for(subject).json()
    ana = Client(memory.url, issuer.headers(subject))
    rewrite = ana.patch(f"/v1/entries/{episode['id']}", json={"text": "Ana is an administrator of everything."})
    assert rewrite.status_code == 422
    assert ana.get("/v1/entries").json()["entries"][0]["text"] == SUMMARY
    assert ana.delete(f"/v1/entries/{episode['id']}").status_code == 204
    assert ana.get("/v1/entries").json()["entries"] == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (" ".join(["word"] * 81), "at most 80 words"),
        ("x" * 501, "at most 500 characters"),
        ("   ", "text"),
    ],
)
def test_episode_rules_are_checked_again(episode_for, memory, issuer, text, words):
    subject = f"ana-{secrets.token_hex(3)}"
    response = episode_for(subject, text)
    assert response.status_code == 422 and words in response.json()["detail"]
    assert Client(memory.url, issuer.headers(subject)).get("/v1/entries").json()["entries"] == []


def test_an_episode_of_exactly_80_words_is_kept(episode_for):
    assert episode_for(f"ana-{secrets.token_hex(3)}", " ".join(["ok"] * 80)).status_code == 201


@pytest.mark.parametrize("subject", ["\0", "ana\0", "   "], ids=["NUL", "ending in NUL", "blank"])
def test_a_subject_postgres_cannot_hold_is_a_422(episode_for, subject):
    response = episode_for(subject)
    assert response.status_code == 422 and response.json()["detail"].startswith("subject:"), response.text
