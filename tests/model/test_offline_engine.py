"""One end-to-end turn on the real offline engine (SmolLM2-135M on llama.cpp), a real tool and real memory.

It asserts the stream's shape and the record, not the small model's judgement: measurement showed that it
picks the right tool about half the time. Greedy decoding (temperature 0) keeps this turn repeatable.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys

import psycopg
import pytest
import requests
from conftest import take_turn

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def offline_engine(offline_port, logs):
    log = open(logs / "offline-engine.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "agentfn.model.engine_server", "--port", str(offline_port),
                                "--ctx", "2048", "--parallel", "1"], stdout=subprocess.PIPE, stderr=log)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 180)
        line = process.stdout.readline() if ready else b""
        assert line and "ready" in json.loads(line), f"the offline engine did not start; see {logs}/offline-engine.log"
        yield json.loads(line)["ready"]
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def test_a_turn_on_the_offline_engine_with_a_real_tool_and_memory(offline_engine, model, memory, person, model_env,
                                                                  logs):
    note = requests.post(memory.url + "/v1/entries", headers=person.headers, json={
        "kind": "preference", "text": "Wants platform status answers in one short sentence.", "source": "test"}).json()
    response, events = take_turn(model.url, person, "offline", "What is the platform status? Answer in one sentence.",
                                 timeout=300)
    assert response.status_code == 200
    (logs / "offline-turn.sse").write_text(response.text)  # the stream as the caller read it (pytest -s shows it)
    print(response.text)
    names = [n for n, _ in events]
    assert names[0] == "recall" and note["id"] in [e["id"] for e in events[0][1]["entries"]]
    assert names[-1] == "done", events[-1]
    # The shape: recall, then (at most one, its limit) a step announced and ended, then the answer's deltas.
    steps = [d for n, d in events if n == "step"]
    assert names[1:-1] == ["step"] * len(steps) + ["delta"] * (len(names) - 2 - len(steps))
    assert len(steps) == 2, "greedy SmolLM2 called no tool for this prompt"
    assert [s["status"] for s in steps] == ["started", "ok"] and steps[1]["tool"] == "platform_status"
    assert "services" in steps[1]["result"]["figures"]
    answer = "".join(d["text"] for n, d in events if n == "delta")
    assert answer.strip() and not answer.lstrip().startswith("{")  # read out of its {"answer": ...} reply
    done = events[-1][1]
    assert done["steps"] == 1 and set(done["cited"]) <= {note["id"]}
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        row = conn.execute("SELECT kind, agent, tier, status, steps, step_log, tokens_in, tokens_out, rounds "
                           "FROM generations WHERE id = %s", (done["generation_id"],)).fetchone()
    kind, agent, tier, status, n, step_log, tokens_in, tokens_out, rounds = row
    assert (kind, agent, tier, status, n, rounds) == ("turn", "offline", "offline", "ok", 1, 2)
    assert [s["tool"] for s in step_log] == ["platform_status"] and tokens_in > 100 and tokens_out > 0
    assert (tokens_in, tokens_out) == (done["usage"]["tokens_in"], done["usage"]["tokens_out"])
