"""The engines' prompt caches warmed ahead of the first turn (`POST /internal/v1/engines/warm`, which the local
platform asks once it is up): one round per agent the caller is granted, with the very system prompt and tool
listing of that agent's turns for the caller, one token written; no turn, no record, nothing of the day spent.
Never routed by the gateway."""

from __future__ import annotations

import threading
import time

import psycopg
import requests
from support.model import Person, take_turn

WARM = "/internal/v1/engines/warm"


def generations(model_env, subject: str) -> tuple[int, int]:
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        made = conn.execute("SELECT count(*) FROM generations WHERE subject = %s", (subject,)).fetchone()
        spent = conn.execute("SELECT coalesce(sum(spent), 0) FROM token_budgets WHERE subject = %s", (subject,)).fetchone()
    return made[0], spent[0]


def test_warming_reads_each_agents_system_prompt_once_and_records_nothing(model, engine, person, model_env):
    before = generations(model_env, person.subject)
    mark = max((r["arrival"] for r in engine.unscripted()), default=0)
    answer = requests.post(model.url + WARM, headers=person.headers, timeout=120)
    assert answer.status_code == 200, answer.text
    warmed = {a["agent"]: a for a in answer.json()["agents"]}
    granted = {
        a["name"] for a in requests.get(model.url + "/v1/agents", headers=person.headers, timeout=10).json()["agents"]
    }
    assert set(warmed) == granted and "secret" not in warmed
    assert warmed["reviewer"]["ok"] is True and warmed["reviewer-small"]["ok"] is True
    assert generations(model_env, person.subject) == before  # no turn: nothing recorded, nothing spent

    sent = [r for r in engine.unscripted() if r["arrival"] > mark]  # this warming's (the engine keeps earlier ones)
    for agent in ("reviewer", "reviewer-small", "guide"):
        sid = engine.script({"text": "Hello."})
        response, _ = take_turn(model.url, person, agent, f"Hello. script:{sid}")
        assert response.status_code == 200, response.text
        turn = engine.requests(sid)[0]
        (ahead,) = [r for r in sent if r["messages"][0] == turn["messages"][0]]  # the same system prompt, once
        assert ahead["max_tokens"] == 1
        assert ahead.get("tools") == turn.get("tools") and ahead.get("response_format") == turn.get("response_format")


def test_warming_needs_a_caller_and_warms_only_what_the_caller_is_granted(model, engine, issuer):
    assert requests.post(model.url + WARM, timeout=10).status_code == 401
    stranger = Person(issuer, groups=())
    answer = requests.post(model.url + WARM, headers=stranger.headers, timeout=120)
    assert answer.status_code == 200
    assert "reviewer" in {a["agent"] for a in answer.json()["agents"]}  # platform_status is everyone's
    assert "secret" not in {a["agent"] for a in answer.json()["agents"]}


def test_the_gateway_never_routes_it(gateway, person):
    assert requests.post(gateway.url + WARM, headers=person.headers, timeout=10).status_code == 404


def test_a_turn_waits_for_its_prompt_being_read_then_reads_only_what_is_new(model, engine, person):
    # The engine takes 3 s to read the first prompt warmed: the asker's, the first of the person's agents by name.
    engine.slow_unscripted(3.0)
    warming = threading.Thread(target=lambda: requests.post(model.url + WARM, headers=person.headers, timeout=120))
    try:
        warming.start()
        time.sleep(0.5)
        sid = engine.script({"text": "Hello."})
        began = time.monotonic()
        response, events = take_turn(model.url, person, "asker", f"Hello. script:{sid}")
        waited = time.monotonic() - began
    finally:
        warming.join()
        engine.slow_unscripted(0, times=0)
    assert response.status_code == 200 and events[-1][0] == "done", events
    assert waited > 2.0  # it waited for the read to end, rather than have the engine read the prompt beside it
    ahead = [r for r in engine.unscripted() if r["messages"][0] == engine.requests(sid)[0]["messages"][0]]
    assert ahead and ahead[-1]["max_tokens"] == 1
