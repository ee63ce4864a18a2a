"""The engines' prompt caches warmed ahead of the first turn (`POST /internal/v1/engines/warm`, which the local
platform asks once it is up): one round per agent the person named is granted, with the very system prompt and tool
listing of that agent's turns for them, one token written; no turn, no record, nothing of the day spent. The door is
the platform's own: only a trusted service account may ask (a caller's token gets 403), one warm-up per agent at a
time. Never routed by the gateway."""

from __future__ import annotations

import threading
import time

import psycopg
import requests
from support.model import Person, take_turn

from agentfn.devstack.harness.identity import MODEL_SERVICE

WARM = "/internal/v1/engines/warm"


def platform(issuer) -> dict[str, str]:
    """The platform's own identity: the trusted service account's token (a projected token, as the dev stack has)."""
    return {"Authorization": f"Bearer {issuer.service_token(MODEL_SERVICE)}"}


def warm_for(model, issuer, person, timeout=120) -> requests.Response:
    return requests.post(model.url + WARM, headers=platform(issuer), json={"caller": person.token}, timeout=timeout)


def generations(model_env, subject: str) -> tuple[int, int]:
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        made = conn.execute("SELECT count(*) FROM generations WHERE subject = %s", (subject,)).fetchone()
        spent = conn.execute("SELECT coalesce(sum(spent), 0) FROM token_budgets WHERE subject = %s", (subject,)).fetchone()
    return made[0], spent[0]


def test_warming_reads_each_agents_system_prompt_once_and_records_nothing(model, scripted_engine, issuer, person, model_env):
    before = generations(model_env, person.subject)
    mark = max((r["arrival"] for r in scripted_engine.unscripted()), default=0)
    answer = warm_for(model, issuer, person)
    assert answer.status_code == 200, answer.text
    warmed = {a["agent"]: a for a in answer.json()["agents"]}
    granted = {
        a["name"] for a in requests.get(model.url + "/v1/agents", headers=person.headers, timeout=10).json()["agents"]
    }
    assert set(warmed) == granted and "secret" not in warmed
    assert warmed["reviewer"]["ok"] is True and warmed["reviewer-small"]["ok"] is True
    assert generations(model_env, person.subject) == before  # no turn: nothing recorded, nothing spent

    sent = [r for r in scripted_engine.unscripted() if r["arrival"] > mark]  # this warming's (the engine keeps earlier ones)
    for agent in ("reviewer", "reviewer-small", "guide"):
        sid = scripted_engine.script({"text": "Hello."})
        response, _ = take_turn(model.url, person, agent, f"Hello. script:{sid}")
        assert response.status_code == 200, response.text
        turn = scripted_engine.requests(sid)[0]
        (ahead,) = [r for r in sent if r["messages"][0] == turn["messages"][0]]  # the same system prompt, once
        assert ahead["max_tokens"] == 1
        assert ahead.get("tools") == turn.get("tools") and ahead.get("response_format") == turn.get("response_format")


def test_only_the_platform_may_warm_and_only_what_the_person_is_granted(model, scripted_engine, issuer, person):
    mark = max((r["arrival"] for r in scripted_engine.unscripted()), default=0)
    assert requests.post(model.url + WARM, timeout=10).status_code == 401
    # A caller's own token, with or without a body: known, and refused (each warm-up is an unmetered round).
    for body in (None, {"caller": person.token}):
        refused = requests.post(model.url + WARM, headers=person.headers, json=body, timeout=10)
        assert refused.status_code == 403, refused.text
        assert refused.headers["Content-Type"].startswith("application/problem+json")
    # Another workload's account (a read tool's) is not the platform's.
    other = {"Authorization": f"Bearer {issuer.service_token('system:serviceaccount:agentfn:agentfn-platform-status')}"}
    assert requests.post(model.url + WARM, headers=other, json={"caller": person.token}, timeout=10).status_code == 403
    # The platform naming no valid person: a problem, and nothing read.
    for body in ({}, {"caller": "not-a-token"}, {"caller": person.token, "extra": 1}):
        bad = requests.post(model.url + WARM, headers=platform(issuer), json=body, timeout=10)
        assert bad.status_code == 422, bad.text
    assert not [r for r in scripted_engine.unscripted() if r["arrival"] > mark]  # the engine was asked nothing

    stranger = Person(issuer, groups=())
    answer = warm_for(model, issuer, stranger)
    assert answer.status_code == 200, answer.text
    assert "reviewer" in {a["agent"] for a in answer.json()["agents"]}  # platform_status is everyone's
    assert "secret" not in {a["agent"] for a in answer.json()["agents"]}


def test_a_second_warm_up_of_an_agent_joins_the_first(model, scripted_engine, issuer):
    person = Person(issuer, groups=("nobody-else",))  # a prompt no earlier test warmed: its read is this test's
    scripted_engine.slow_unscripted(3.0)
    mark = max((r["arrival"] for r in scripted_engine.unscripted()), default=0)
    answers: list[requests.Response] = []
    first = threading.Thread(target=lambda: answers.append(warm_for(model, issuer, person)))
    try:
        first.start()
        time.sleep(0.5)
        second = warm_for(model, issuer, person)
    finally:
        first.join()
        scripted_engine.slow_unscripted(0, times=0)
    assert second.status_code == 200 and answers[0].status_code == 200, second.text
    agents = [a["agent"] for a in answers[0].json()["agents"]]
    assert agents and agents == [a["agent"] for a in second.json()["agents"]]
    joined = second.json()["agents"][0]
    assert joined["joined"] is True and joined["ok"] is True, joined
    sent = [r for r in scripted_engine.unscripted() if r["arrival"] > mark]
    prompts = [r["messages"][0]["content"] for r in sent]
    assert prompts.count(prompts[0]) == 1, len(prompts)  # the first agent's prompt was read once, not twice


def test_the_gateway_never_routes_it(gateway, person):
    assert requests.post(gateway.url + WARM, headers=person.headers, timeout=10).status_code == 404


def test_a_turn_waits_for_its_prompt_being_read_says_so_then_reads_only_what_is_new(model, scripted_engine, issuer, person):
    # The engine takes 3 s to read the first prompt warmed: the asker's, the first of the person's agents by name.
    scripted_engine.slow_unscripted(3.0)
    warming = threading.Thread(target=lambda: warm_for(model, issuer, person))
    try:
        warming.start()
        time.sleep(0.5)
        sid = scripted_engine.script({"text": "Hello."})
        began = time.monotonic()
        response, events = take_turn(model.url, person, "asker", f"Hello. script:{sid}")
        waited = time.monotonic() - began
    finally:
        warming.join()
        scripted_engine.slow_unscripted(0, times=0)
    assert response.status_code == 200 and events[-1][0] == "done", events
    assert events[0] == ("wait", {"reason": "warming", "detail": "the engine is still reading the agent's prompt"})
    assert waited > 2.0  # it waited for the read to end, rather than have the engine read the prompt beside it
    ahead = [r for r in scripted_engine.unscripted() if r["messages"][0] == scripted_engine.requests(sid)[0]["messages"][0]]
    assert ahead and ahead[-1]["max_tokens"] == 1

    # Once read, a turn is told nothing of the kind.
    sid = scripted_engine.script({"text": "Hello again."})
    response, events = take_turn(model.url, person, "asker", f"Hello. script:{sid}")
    assert response.status_code == 200 and "wait" not in [name for name, _ in events], events
