"""A model change is a re-embed: entries of another model are invisible to recall until moved."""

import os
import secrets
import subprocess
import sys

import pytest

from agentfn.devstack.harness.servers import Client, Gunicorn


@pytest.fixture
def minilm_memory(memory_env, tmp_path):
    server = Gunicorn(
        "agentfn.memory.app:create_app()",
        {**memory_env, "AGENTFN_EMBEDDING_MODEL": "all-minilm-l6-v2-int8"},
        tmp_path / "memory-minilm.log",
    )
    server.start()
    yield server
    server.stop()


def test_reembed_moves_entries_to_the_configured_model(memory, minilm_memory, memory_env, postgres, issuer):
    subject = f"mover-{secrets.token_hex(3)}"
    old = Client(minilm_memory.url, issuer.headers(subject))
    kept = old.post("/v1/entries", json={"kind": "fact", "text": "The ledger listens on port 7311.", "source": "s"}).json()
    assert kept["model"] == "all-minilm-l6-v2-int8"

    current = Client(memory.url, issuer.headers(subject))
    query = {"query": "Which port does the ledger listen on?"}
    assert current.post("/v1/recall", json=query).json()["entries"] == []

    env = {**os.environ, **memory_env, "AGENTFN_ADMIN_DATABASE_URL": postgres.admin_dsn}
    done = subprocess.run(
        [sys.executable, "-m", "agentfn.memory.reembed"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "moved 1 entries of 1 subjects to multilingual-e5-small-q4" in done.stdout

    recalled = current.post("/v1/recall", json=query).json()
    assert [e["id"] for e in recalled["entries"]] == [kept["id"]]
    assert recalled["entries"][0]["model"] == recalled["model"] == "multilingual-e5-small-q4"
