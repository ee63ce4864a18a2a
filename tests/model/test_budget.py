"""The caller's daily token budget (L2): held before each round, settled after, atomic across processes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from support.model import SMALL_DAILY, take_turn

MAX_ROUND = 100  # the frugal instance's completion tokens per round


def spent(model_env, subject):
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        budget = conn.execute("SELECT coalesce(sum(spent), 0) FROM token_budgets WHERE subject = %s", (subject,)).fetchone()[
            0
        ]
        rows = conn.execute(
            "SELECT status, tokens_in + tokens_out, reserved FROM generations WHERE subject = %s", (subject,)
        ).fetchall()
    return budget, rows


@pytest.mark.parametrize("agent", ["reviewer", "reviewer-small"])
def test_the_budget_spent_mid_turn_ends_it_with_an_error_event(frugal_model, scripted_engine, person, model_env, agent):
    sid = scripted_engine.script(
        {
            "call": {"name": "platform_status", "arguments": {}},
            "usage": {"prompt_tokens": SMALL_DAILY - 150, "completion_tokens": 20},
        },
        {"text": "never sent"},
    )
    response, events = take_turn(frugal_model.url, person, agent, f"Status? script:{sid}")
    assert response.status_code == 200
    names = [n for n, _ in events]
    assert names[-1] == "error" and events[-1][1]["status"] == 429
    assert events[-1][1]["type"].endswith("/daily-tokens")
    assert names.count("step") == 2 and "done" not in names
    assert len(scripted_engine.requests(sid)) == 1  # the second round never reached the engine
    budget, rows = spent(model_env, person.subject)
    assert budget == SMALL_DAILY - 130 and rows == [("budget", SMALL_DAILY - 130, 0)]
    # The next turn is refused before it starts: a plain 429 problem, with when to come back.
    again, _ = take_turn(frugal_model.url, person, agent, "And now?")
    assert again.status_code == 429 and again.headers["Content-Type"] == "application/problem+json"
    assert 0 < int(again.headers["Retry-After"]) <= 86401
    assert again.json()["type"].endswith("/daily-tokens")


def twenty_at_once(model, person, turn, scripted_engine) -> list:
    """Twenty turns of the guide at once, `turn(i)` giving each its engine script and message; the ones done.
    Every turn is done or refused (429, or an error event), and some of each."""

    def one(i):
        script, message = turn(i)
        return take_turn(model.url, person, "guide", f"{message} script:{scripted_engine.script(script)}")

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    done = [r for r, events in results if r.status_code == 200 and events[-1][0] == "done"]
    refused = [r for r, events in results if r.status_code == 429 or (events and events[-1][0] == "error")]
    assert len(done) + len(refused) == 20, [(r.status_code, e[-1][0] if e else r.text[:90]) for r, e in results]
    assert done and refused, (len(done), len(refused))
    return done


def test_twenty_concurrent_turns_never_overspend_a_small_budget(frugal_model, scripted_engine, person, model_env):
    done = twenty_at_once(
        frugal_model,
        person,
        lambda i: ({"text": f"answer {i}", "usage": {"prompt_tokens": 300, "completion_tokens": 60}}, f"Question {i}."),
        scripted_engine,
    )
    budget, rows = spent(model_env, person.subject)
    # Held before the round, so the day's limit holds even with twenty turns in two processes at once.
    assert budget <= SMALL_DAILY + MAX_ROUND
    assert budget == sum(tokens for _, tokens, _ in rows) == 360 * len(done)
    assert all(reserved == 0 for *_, reserved in rows) and len(rows) == 20


def test_a_turn_whose_agent_allows_fewer_tokens_than_a_round_is_refused(frugal_model, issuer, model_env, person):
    # frugal's tokensPerTurn (1500) covers a round; here the caller's message alone does not fit it.
    response, _ = take_turn(frugal_model.url, person, "frugal", "word " * 2000)
    assert response.status_code == 429 and response.json()["type"].endswith("/turn-tokens")


def test_concurrent_turns_of_emoji_never_overspend_a_small_budget(frugal_model, scripted_engine, person, model_env):
    # An engine counts emoji as several tokens each (SmolLM2: 300 emoji are 899 tokens); this one counts
    # a token per UTF-8 byte, the most any byte-level tokenizer may. The hold must never be below it.
    emoji = "\U0001f642" * 250  # 1,000 bytes: a third of the budget held at 3 characters a token would cover it

    done = twenty_at_once(
        frugal_model,
        person,
        lambda i: ({"text": "\U0001f44d" * 20, "usage": "bytes"}, f"{emoji} Question {i}."),
        scripted_engine,
    )
    budget, rows = spent(model_env, person.subject)
    assert budget == sum(tokens for _, tokens, _ in rows)
    per_turn = budget // len(done)
    assert per_turn > 1000  # the engine's count, not the old estimate's (about 100 for these 250 emoji)
    assert budget <= SMALL_DAILY + MAX_ROUND, (budget, len(done))


def test_a_turn_is_checked_against_its_agent_at_the_likely_count(frugal_model, scripted_engine, person):
    # 1,200 characters of prose: held from the day as 1,200 tokens, but about 400 to the engine, well within
    # frugal's 1,500 a turn; the turn runs (holding bytes against the turn too would refuse it).
    sid = scripted_engine.script({"text": "Short answer.", "usage": {"prompt_tokens": 450, "completion_tokens": 5}})
    response, events = take_turn(frugal_model.url, person, "frugal", "word " * 235 + f"script:{sid}")
    assert response.status_code == 200, response.text
    assert events[-1][0] == "done", events[-1]
