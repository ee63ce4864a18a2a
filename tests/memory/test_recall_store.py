"""Recall in the store: the transaction begun and the text list found while the question is embedded, with the
same entries, order, `matched` and similarity as the one statement that has the embedding at hand."""

import datetime
import itertools
import secrets
import time
import uuid

import psycopg
import pytest

from agentfn.devstack.harness.servers import Client
from agentfn.memory import store as store_module
from agentfn.memory import terms
from agentfn.memory.embedder import DEFAULT_MODEL, model_config
from agentfn.memory.memory import Memory
from agentfn.memory.store import Store

NOTES = [
    "Mačka mi se zove Luna.",
    "Sestra mi živi u Splitu.",
    "My dog is called Biscuit.",
    "I'm allergic to penicillin.",
    "Marko's birthday is on 12 May.",
    "Marta's birthday is on 21 May.",
    "Marko lives in Zagreb.",
    "The ledger service listens on port 8443.",
    "The ledger deploys every Tuesday at 10:00.",
    "I prefer short answers in Croatian.",
    "The search service runs 3 replicas.",
    "Ana's birthday is on 30 July.",
]
QUESTIONS = [
    "kako zovem mačku?",
    "what's my cat's name?",
    "when is Marta's birthday?",
    "when are the birthdays?",
    "where does Marko live?",
    "which port does the ledger use?",
    "when does the ledger deploy?",
    "how should you answer me?",
    "Što kuhati za večeru s djecom?",
    "is it really 1.30?",
]


def same(found: list[dict], expected: list[dict]) -> bool:
    """The same rows, in the same order; a similarity computed in the process may differ in its last bits."""
    if [{**row, "similarity": None} for row in found] != [{**row, "similarity": None} for row in expected]:
        return False
    return all(abs(a["similarity"] - b["similarity"]) < 1e-6 for a, b in zip(found, expected, strict=True))


def hold(store, subject, e5):
    """A recall of the subject, after which the store holds its entries (if it may)."""
    store.recall(subject, "hold", lambda: e5.embed_queries(["hold"])[0], DEFAULT_MODEL, 0.82, 3, None, True)
    store.wait_held()


@pytest.fixture(scope="module")
def kept_subject(memory, issuer):
    """A subject with the notes above, kept through the door (embedded by memory)."""
    subject = f"user-{secrets.token_hex(4)}"
    caller = Client(memory.url, issuer.headers(subject))
    for i, text in enumerate(NOTES):
        kind = "preference" if "prefer" in text else "fact"
        response = caller.post("/v1/entries", json={"kind": kind, "text": text, "source": f"chat {i}"})
        assert response.status_code == 201, response.text
    return subject


HELD = {"entries held": 64 * 2**20, "entries too many to hold": 1, "ranked in Postgres": 0}


@pytest.fixture(params=list(HELD))
def store(memory_env, request):
    """A store whose recalls rank the entries it holds (as memory's does), or those it loaded but may not keep (then
    Postgres ranks them), or one that holds none."""
    held = HELD[request.param]
    # One connection: a leaked one would show.
    opened = Store(memory_env["AGENTFN_DATABASE_URL"], pool_size=1, held_bytes=held)
    yield opened
    opened.close()


def test_recall_while_embedding_finds_what_one_statement_finds(store, kept_subject, e5):
    hold(store, kept_subject, e5)
    found = 0
    shipped = model_config(DEFAULT_MODEL)
    for question, hybrid, kinds, (threshold, limit, cuts) in itertools.product(
        QUESTIONS,
        (True, False),
        (None, ["fact"]),
        ((0.82, 3, {"gap": shipped.gap, "lift": shipped.lift}), (0.75, 5, {"gap": float("inf")})),
    ):
        query = e5.embed_queries([question])[0]
        args = (DEFAULT_MODEL, threshold, limit, kinds, hybrid)
        at_once = store.recall(kept_subject, question, query, *args, **cuts, vector_alone=2)
        meanwhile = store.recall(kept_subject, question, lambda q=query: q, *args, **cuts, vector_alone=2)
        assert same(meanwhile, at_once), question
        found += len(at_once)
    assert found > 50  # the questions find entries by both lists, not nothing alike


def test_the_text_list_is_found_while_the_question_is_embedded(store, kept_subject, e5, postgres):
    """The embedding waits here until the store's transaction holds the subject's setting: it began meanwhile."""
    seen = []

    def embed():
        deadline = time.monotonic() + 10
        with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:
            while not seen and time.monotonic() < deadline:
                seen.extend(
                    admin.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE usename = 'agentfn_memory' AND state = 'idle in transaction' "
                        "AND query LIKE '%%ts_rank%%'"
                    ).fetchall()
                )
                time.sleep(0.01)
        return e5.embed_queries(["when is Marta's birthday?"])[0]

    rows = store.recall(kept_subject, "when is Marta's birthday?", embed, DEFAULT_MODEL, 0.82, 3, None, True, gap=0.04)
    assert seen, "the text list was not found while the question was embedded"
    assert [r["text"] for r in rows] == ["Marta's birthday is on 21 May."]


def test_a_failed_embedding_gives_the_connection_back(store, kept_subject, e5):
    def broken():
        raise RuntimeError("the engine failed")

    for _ in range(3):  # the pool has one connection: a leaked one would time the next recall out
        with pytest.raises(RuntimeError, match="the engine failed"):
            store.recall(kept_subject, "when is Marta's birthday?", broken, DEFAULT_MODEL, 0.82, 3, None, True)
    query = e5.embed_queries(["when is Marta's birthday?"])[0]
    rows = store.recall(
        kept_subject, "when is Marta's birthday?", lambda: query, DEFAULT_MODEL, 0.82, 3, None, True, gap=0.04
    )
    assert [r["text"] for r in rows] == ["Marta's birthday is on 21 May."]


def test_recall_counts_an_entrys_tokens_once_per_process(e5):
    """The token count of an entry recalled again is the tokenizer's, kept from the first time."""
    now = datetime.datetime.now(datetime.UTC)
    rows = [
        {"id": uuid.uuid4(), "kind": "fact", "text": text, "source": "s", "created_at": now, "updated_at": now}
        | {"model": DEFAULT_MODEL, "similarity": 0.9, "matched": ["vector"]}
        for text in NOTES[:3]
    ]

    class Found:
        def recall(self, subject, question, query, *args, **kwargs):
            query()
            return rows

    class Counting:
        config, counted = e5.config, []

        def embed_queries(self, texts):
            return e5.embed_queries(texts)

        def count_tokens(self, text):
            self.counted.append(text)
            return e5.count_tokens(text)

    embedder = Counting()
    memory = Memory(Found(), embedder, max_tokens=1000)
    first, again = (memory.recall("someone", "my pets?", None, None, None)["entries"] for _ in range(2))
    assert first == again
    assert [e["tokens"] for e in again] == [e5.count_tokens(text) for text in NOTES[:3]]
    assert sorted(embedder.counted) == sorted(NOTES[:3])


def test_recall_keeps_its_prepared_statements_and_plans_them_once(store, kept_subject, e5):
    """Each recall ends its transaction without discarding the connection's prepared statements (psycopg's
    rollback would), so they are parsed once per connection; and each runs its generic plan, never planned again for
    each question (here the session asks for that: recall overrides it)."""
    hold(store, kept_subject, e5)
    with store.pool.connection() as conn:  # the pool's one connection
        conn.execute("SET plan_cache_mode = force_custom_plan")
        conn.commit()
    query = e5.embed_queries(["when is Marta's birthday?"])[0]
    for _ in range(8):  # psycopg prepares a statement at its 5th use
        store.recall(kept_subject, "when is Marta's birthday?", lambda: query, DEFAULT_MODEL, 0.82, 3, None, True, gap=0.04)
    with store.pool.connection() as conn:
        prepared = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    recall = [
        (generic, custom) for statement, generic, custom in prepared if "unnest(" in statement or "ts_rank" in statement
    ]
    # The text list, and the statement that fuses it with the vector list unless the store ranks what it holds.
    assert len(recall) == (1 if store.held.max_bytes > 1 else 2), prepared
    assert all(generic > 0 and custom == 0 for generic, custom in recall), recall


# NEAREST as it ranked the subject's entries before the limit (a window over all of them): the reference.
RANKED_BEFORE_THE_LIMIT = """
                SELECT e.id, {SIMILARITY} AS similarity,
                       row_number() OVER (ORDER BY {SIMILARITY} DESC) AS rank
                FROM entries e, q
                WHERE e.subject = %(subject)s AND e.model = %(model)s AND {KINDS}
                ORDER BY {SIMILARITY} DESC
                LIMIT %(depth)s
            ) nearest
        ) crowd"""


@pytest.fixture(scope="module")
def crowded(memory, issuer, postgres):
    """A subject with the notes above among more entries than recall ranks (store.DEPTH), of random unit vectors
    (every embedder's vectors are unit vectors)."""
    subject = f"user-{secrets.token_hex(4)}"
    caller = Client(memory.url, issuer.headers(subject))
    for text in NOTES:
        assert caller.post("/v1/entries", json={"kind": "fact", "text": text, "source": "s"}).status_code == 201
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as admin:
        admin.execute(
            "INSERT INTO memory.entries (id, subject, kind, text, source, model, embedding) "
            "SELECT gen_random_uuid(), %s, 'fact', 'Filler ' || i, 's', %s, "
            "l2_normalize((SELECT array_agg(random() - 0.5) FROM generate_series(1, 384 + 0 * i))::halfvec) "
            "FROM generate_series(1, 3 * %s) i",
            (subject, DEFAULT_MODEL, store_module.DEPTH),
        )
    return subject


def test_recall_ranks_after_the_limit_as_it_ranked_before_it(store, crowded, e5):
    hold(store, crowded, e5)
    shipped = model_config(DEFAULT_MODEL)
    new = "SELECT id, similarity, row_number() OVER (ORDER BY similarity DESC) AS rank"
    start = store_module.RECALL_HYBRID.index(new)
    end = store_module.RECALL_HYBRID.index(") crowd") + len(") crowd")
    before = (
        store_module.RECALL_HYBRID[:start]
        + RANKED_BEFORE_THE_LIMIT.strip()
        .replace("{KINDS}", store_module.KINDS)
        .replace("{SIMILARITY}", store_module.SIMILARITY)
        + store_module.RECALL_HYBRID[end:]
    )
    found = 0
    for question, threshold, cuts in itertools.product(
        QUESTIONS, (0.82, -1.0), ({"gap": shipped.gap, "lift": shipped.lift}, {"gap": float("inf")})
    ):
        query = e5.embed_queries([question])[0]
        args = (DEFAULT_MODEL, threshold, 5, None, True)
        now = store.recall(crowded, question, lambda q=query: q, *args, **cuts, vector_alone=2)
        params = dict(subject=crowded, question=question, query=query, model=DEFAULT_MODEL, threshold=threshold)
        params |= dict(limit=5, kinds=None, k=store_module.RRF_K, depth=store_module.DEPTH, vector_alone=2)
        params |= {"gap": float("inf"), "lift": float("-inf")} | cuts | terms.parameters(question)
        with store.subject(crowded) as cur:
            assert same(now, cur.execute(before, params).fetchall()), question
        found += len(now)
    assert found > 50
