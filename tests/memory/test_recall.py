"""Recall as shipped: the ranking and cut-offs the recall study measured for the default model, through memory's
HTTP doors; and the shipped configuration, checked against the one the study chose (studies/recall/results.json)."""

import json
import math
from pathlib import Path

import pytest

from agentfn.memory import store, terms
from agentfn.memory.embedder import DEFAULT_MODEL, model_config
from agentfn.memory.schemas import MAX_RECALL

RESULTS = Path(__file__).resolve().parents[2] / "studies" / "recall" / "results.json"
# The study's names for how notes and questions reach the engine: (query prefix, document prefix) -> name.
EMBEDDINGS = {("query: ", "passage: "): "asym q/p", ("passage: ", "passage: "): "sym p/p", ("query: ", "query: "): "sym q/q"}


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # as the study writes "none"


def shipped_setting() -> dict:
    """The product's recall, in the study's terms. The last group is what store.RECALL_HYBRID does and no setting
    changes: one floor for every language and kind, no margin, equal weights, shown what
    either list ranks first or what both lists find (fused score >= 1/(k + 1)), full-text by ts_rank, no re-ranking."""
    config = model_config(DEFAULT_MODEL)
    rules = {v: k for k, v in terms.SUFFIX_RULES.items()}
    return {
        "embedding": EMBEDDINGS[(config.query_prefix, config.document_prefix)],
        "hybrid": config.recall == "hybrid",
        "floor": config.threshold,
        "k": store.RRF_K,
        "depth": store.DEPTH,
        "stem_en": terms.RULES["en"]["stem"],
        "stem_hr": terms.RULES["hr"]["stem"],
        "rule_en": rules[terms.RULES["en"]["suffixes"]],
        "rule_hr": rules[terms.RULES["hr"]["suffixes"]],
        "gap": finite(config.gap),
        "vector_alone": config.vector_alone,
        "cap": min(config.cap, MAX_RECALL),
        "hr_shift": 0.0,
        "episode_shift": 0.0,
        "preference_shift": 0.0,
        "margin": None,
        "text_weight": 1.0,
        "cut": 1.0,
        "text_alone": 1,
        "trigram": False,
        "baseline": "near5" if math.isfinite(config.lift) else "none",
        "lift": finite(config.lift),
        "text_floor": None,
        "rerank": 0.0,
        "rerank_floor": None,
        "rerank_margin": None,
    }


def test_the_shipped_recall_is_the_one_the_study_chose():
    results = json.loads(RESULTS.read_text(encoding="utf-8"))
    assert results["model"] == DEFAULT_MODEL
    assert shipped_setting() == results["shipped"]["setting"]


def keep(caller, text, kind="fact"):
    response = caller.post("/v1/entries", json={"kind": kind, "text": text, "source": "chat 2026-12-03"})
    assert response.status_code == 201, response.text
    return response.json()


PETS = [
    "Mačka mi se zove Luna.",
    "Sestra mi živi u Splitu.",
    "Vozim električni bicikl.",
    "My dog is called Biscuit.",
    "I'm allergic to penicillin.",
]
BIRTHDAYS = ["Marko's birthday is on 12 May.", "Marta's birthday is on 21 May.", "The search service runs 3 replicas."]
MARKO = [
    "Marko's birthday is on 12 May.",
    "Marko lives in Zagreb.",
    "Marko works at the bank.",
    "The search service runs 3 replicas.",
]
FOUR_BIRTHDAYS = [
    "Marko's birthday is on 12 May.",
    "Marta's birthday is on 21 May.",
    "Ivan's birthday is on 3 June.",
    "Ana's birthday is on 30 July.",
    "The search service runs 3 replicas.",
]


# (notes kept, question, the notes shown in order, which lists found the first), measured for the default model.
@pytest.mark.parametrize(
    "notes, question, shown, first_matched",
    [
        pytest.param(
            PETS,
            "kako zovem mačku?",
            ["Mačka mi se zove Luna."],
            ["vector", "text"],
            id="a Croatian word in another case matches by its first four letters; the dog, level with the crowd, not",
        ),
        pytest.param(
            PETS,
            "what's my cat's name?",
            ["Mačka mi se zove Luna."],
            ["vector"],
            id="across languages, sharing no word: the nearest, standing out from the 5 nearest; not the dog",
        ),
        pytest.param(
            BIRTHDAYS,
            "when is Marta's birthday?",
            ["Marta's birthday is on 21 May."],
            ["vector", "text"],
            id="of two notes one detail apart, only the one naming the asked detail",
        ),
        pytest.param(
            MARKO,
            "where does Marko live?",
            ["Marko lives in Zagreb.", "Marko works at the bank.", "Marko's birthday is on 12 May."],
            ["vector", "text"],
            id="the note asked about first, then what both lists find: Marko's other notes, not the replicas",
        ),
        pytest.param(PETS, "Što kuhati za večeru s djecom?", [], None, id="no note near enough and no shared word: nothing"),
    ],
)
def test_recall_ranks_and_cuts_as_measured(caller, notes, question, shown, first_matched):
    for text in notes:
        keep(caller, text)
    entries = caller.post("/v1/recall", json={"query": question}).json()["entries"]
    assert [e["text"] for e in entries] == shown
    if shown:
        assert entries[0]["matched"] == first_matched


# Four birthdays share the asked word (each first in the text list): all four are shown, and a request's limit
# below that holds.
@pytest.mark.parametrize("limit, count", [(None, 4), (5, 4), (2, 2)])
def test_recall_shows_at_most_the_requests_limit(caller, limit, count):
    for text in FOUR_BIRTHDAYS:
        keep(caller, text)
    body = {"query": "when are the birthdays?"} | ({"limit": limit} if limit else {})
    entries = caller.post("/v1/recall", json=body).json()["entries"]
    assert len(entries) == count
    assert all("birthday" in e["text"] for e in entries)


PREFERENCES = ["Always call me Captain.", "Answer me in one short sentence.", "Odgovaraj mi na hrvatskom."]


@pytest.mark.parametrize(
    "body, preferences",
    [
        pytest.param({}, [], id="not asked: only what is near the question"),
        pytest.param({"preferences": 2}, PREFERENCES[:0:-1], id="the newest two, after the nearest"),
        pytest.param({"preferences": 5, "limit": 3}, PREFERENCES[::-1][:2], id="within the limit: the nearest keeps one"),
        pytest.param({"preferences": 2, "kinds": ["fact"]}, [], id="not when the request's kinds leave them out"),
    ],
)
def test_recall_shows_the_newest_preferences_however_far_from_the_question(caller, body, preferences):
    for text in [*MARKO, *PREFERENCES]:
        keep(caller, text, kind="preference" if text in PREFERENCES else "fact")
    entries = caller.post("/v1/recall", json={"query": "where does Marko live?", **body}).json()["entries"]
    assert entries[0]["text"] == "Marko lives in Zagreb." and "standing" not in entries[0]["matched"]
    standing = [e for e in entries if e["matched"] == ["standing"]]
    assert [e["text"] for e in standing] == preferences
    assert all(e["kind"] == "preference" and -1 <= e["similarity"] <= 1 for e in standing)
    assert len(entries) <= body.get("limit", MAX_RECALL)
    assert len({e["id"] for e in entries}) == len(entries)


def test_recall_refuses_a_count_of_preferences_it_cannot_show(caller):
    for count in (-1, MAX_RECALL + 1, "2", 1.5):
        answer = caller.post("/v1/recall", json={"query": "where does Marko live?", "preferences": count})
        assert answer.status_code == 422 and "preferences" in answer.json()["detail"]
