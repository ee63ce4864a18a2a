"""The memory doors, through HTTP on gunicorn and the real database and model."""

import uuid

import requests

from agentfn.memory.embedder import DEFAULT_MODEL, model_config


def keep(caller, text, kind="fact", source="chat 2026-12-01"):
    response = caller.post("/v1/entries", json={"kind": kind, "text": text, "source": source})
    assert response.status_code == 201, response.text
    return response.json()


def test_create_returns_the_entry_with_its_source_and_times(caller):
    entry = keep(caller, "The ledger service listens on port 7311.", source="chat about the ledger")
    assert uuid.UUID(entry["id"])
    assert entry["kind"] == "fact"
    assert entry["text"] == "The ledger service listens on port 7311."
    assert entry["source"] == "chat about the ledger"
    assert entry["created_at"] == entry["updated_at"]


def test_list_shows_the_callers_entries_newest_first_and_filters_by_kind(caller):
    first = keep(caller, "Ledger facts are append-only.")
    second = keep(caller, "Answer in Croatian.", kind="preference")
    listed = caller.get("/v1/entries").json()["entries"]
    assert [e["id"] for e in listed] == [second["id"], first["id"]]
    prefs = caller.get("/v1/entries", params={"kind": "preference"}).json()["entries"]
    assert [e["id"] for e in prefs] == [second["id"]]
    assert caller.get("/v1/entries", params={"limit": 1, "offset": 1}).json()["entries"][0]["id"] == first["id"]


def test_correct_changes_text_and_embeds_again(caller):
    entry = keep(caller, "The billing job runs at 02:00.")
    before = caller.post("/v1/recall", json={"query": "When does the billing job run?"}).json()["entries"]
    assert [e["id"] for e in before] == [entry["id"]]
    corrected = caller.patch(f"/v1/entries/{entry['id']}", json={"text": "My favourite editor is Helix."})
    assert corrected.status_code == 200, corrected.text
    assert corrected.json()["text"] == "My favourite editor is Helix."
    assert corrected.json()["source"] == entry["source"]
    assert corrected.json()["updated_at"] > entry["updated_at"]
    # The vector moved with the text: the old question no longer finds it, the new one does.
    assert caller.post("/v1/recall", json={"query": "When does the billing job run?"}).json()["entries"] == []
    after = caller.post("/v1/recall", json={"query": "Which editor do I like best?"}).json()["entries"]
    assert [e["id"] for e in after] == [entry["id"]]


def test_correct_source_only_keeps_the_text(caller):
    entry = keep(caller, "Staging is in Frankfurt.")
    response = caller.patch(f"/v1/entries/{entry['id']}", json={"source": "the infra wiki"})
    assert response.json()["text"] == "Staging is in Frankfurt." and response.json()["source"] == "the infra wiki"


def test_forget_deletes_and_then_answers_404(caller):
    entry = keep(caller, "My on-call week starts on Monday.")
    assert caller.delete(f"/v1/entries/{entry['id']}").status_code == 204
    assert caller.delete(f"/v1/entries/{entry['id']}").status_code == 404
    assert caller.patch(f"/v1/entries/{entry['id']}", json={"source": "x"}).status_code == 404
    assert caller.get("/v1/entries").json()["entries"] == []


def test_recall_finds_the_right_entry_and_says_which_model_and_threshold(caller):
    port = keep(caller, "The ledger service listens on port 7311.")
    keep(caller, "I prefer tabs over spaces in Go code.", kind="preference")
    keep(caller, "Moja mačka se zove Luna.")
    body = caller.post("/v1/recall", json={"query": "which port does the ledger use?"}).json()
    assert body["entries"][0]["id"] == port["id"]
    assert body["entries"][0]["text"] == port["text"] and body["entries"][0]["source"] == port["source"]
    assert body["model"] and 0 < body["threshold"] < 1
    assert all(e["similarity"] >= body["threshold"] for e in body["entries"] if "vector" in e["matched"])
    sims = [e["similarity"] for e in body["entries"]]
    assert sims == sorted(sims, reverse=True)


def test_recall_in_croatian_finds_a_croatian_note(caller):
    cat = keep(caller, "Moja mačka se zove Luna.")
    keep(caller, "The ledger service listens on port 7311.")
    body = caller.post("/v1/recall", json={"query": "Kako se zove moja mačka?"}).json()
    assert body["entries"][0]["id"] == cat["id"]


def test_recall_matches_the_questions_terms_without_diacritics(caller):
    cat = keep(caller, "Moja mačka se zove Luna.")
    keep(caller, "Galeb runs on MariaDB 11.")
    body = caller.post("/v1/recall", json={"query": "kako se zove macka"}).json()
    assert body["entries"][0]["id"] == cat["id"]
    assert "text" in body["entries"][0]["matched"]


def test_recall_terms_are_split_as_the_notes_are(caller):
    version = keep(caller, "Staging runs Kubernetes 1.30.")
    keep(caller, "Backups are kept for 30 days.")
    body = caller.post("/v1/recall", json={"query": "is it really 1.30?"}).json()
    assert [e["id"] for e in body["entries"] if "text" in e["matched"]] == [version["id"]]


def test_recall_is_capped_at_five_and_the_models_cap_and_by_the_request_limit(caller):
    for i in range(7):
        keep(caller, f"Deploy note {i}: the ledger deploys from the main branch.")
    query = {"query": "how does the ledger deploy?"}
    cap = min(5, model_config(DEFAULT_MODEL).cap)
    assert len(caller.post("/v1/recall", json=query).json()["entries"]) == cap
    assert len(caller.post("/v1/recall", json={**query, "limit": 2}).json()["entries"]) == 2


def test_recall_token_cap_counts_with_the_models_tokenizer(caller):
    for i in range(3):
        keep(caller, f"Deploy note {i}: the ledger deploys from the main branch every Tuesday.")
    full = caller.post("/v1/recall", json={"query": "when does the ledger deploy?"}).json()["entries"]
    assert len(full) == 3 and all(e["tokens"] > 5 for e in full)
    cap = full[0]["tokens"] + full[1]["tokens"]
    capped = caller.post("/v1/recall", json={"query": "when does the ledger deploy?", "max_tokens": cap}).json()
    assert [e["id"] for e in capped["entries"]] == [e["id"] for e in full[:2]]


def test_recall_filters_by_kind(caller):
    keep(caller, "Keep reviews short.", kind="preference")
    fact = keep(caller, "Reviews of the ledger need two approvals.")
    body = caller.post("/v1/recall", json={"query": "ledger reviews", "kinds": ["fact"]}).json()
    assert [e["id"] for e in body["entries"]] == [fact["id"]]


def test_recall_returns_nothing_for_an_unrelated_question(caller):
    keep(caller, "The ledger service listens on port 7311.")
    assert caller.post("/v1/recall", json={"query": "Što kuhati za večeru s djecom?"}).json()["entries"] == []


def test_every_response_carries_a_request_id(caller):
    response = caller.get("/v1/entries", headers={"X-Request-Id": "abc-123"})
    assert response.headers["X-Request-Id"] == "abc-123"
    assert len(caller.get("/v1/entries").headers["X-Request-Id"]) == 32


def test_health_and_readiness(memory):

    assert requests.get(memory.url + "/healthz").json() == {"status": "ok"}
    ready = requests.get(memory.url + "/readyz").json()
    assert ready == {"ready": True, "checks": {"database": True, "model": True}}
