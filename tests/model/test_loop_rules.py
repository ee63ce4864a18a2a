"""The loop's rules through the turn door, in this process (the `loop` fixture: the model function from its app
factory, Flask's test client, test doubles of the engine, memory and the tool functions; the real store and issuer).

The end-to-end tests (test_loop_cases.py, test_approval.py, test_budget.py, test_record.py) run the same rules with
every part a process of its own; these say in seconds whether a rule still holds.
"""

from __future__ import annotations

import secrets
import time

import pytest
from support.in_process import IN_PROCESS_DAILY, record, spent, turn
from support.model import Person

STATUS = "platform_status"


def call(name=STATUS, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def steps(events) -> list[tuple[int, str, str]]:
    return [(d["n"], d["tool"], d["status"]) for name, d in events if name == "step"]


def answer(events) -> str:
    return "".join(d["text"] for name, d in events if name == "delta")


def calls_of(loop, tool: str) -> list[dict]:
    return loop.tools[tool].app.extensions["calls"]


def test_a_turn_streams_its_steps_and_answer_and_records_counts_not_words(loop, person):
    said, argument, answered = (f"canary{secrets.token_hex(6)}" for _ in range(3))
    loop.engine.script(
        {"calls": [call(service=argument)], "usage": (120, 12)},
        {"text": f"All is well with {answered}.", "usage": (200, 20)},
    )
    response, events = turn(loop.client, person.token, "checker", f"How is {said}?")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert steps(events) == [(1, STATUS, "started"), (1, STATUS, "ok")]
    assert answer(events) == f"All is well with {answered}."
    name, done = events[-1]
    assert name == "done" and done["steps"] == 1 and done["pending"] == []
    assert done["usage"] == {"tokens_in": 320, "tokens_out": 32, "rounds": 2}
    assert response.headers["X-Generation-Id"] == done["generation_id"]
    assert calls_of(loop, STATUS) == [{"service": argument}]
    # The second round read the step's result in the tool role.
    told = loop.engine.requests[1]["messages"][-1]
    assert told["role"] == "tool" and argument in told["content"]

    row = record(loop.dsn, done["generation_id"])
    assert (row["kind"], row["channel"], row["subject"], row["agent"], row["tier"]) == (
        "turn",
        "step",
        person.subject,
        "checker",
        "fast",
    )
    assert (row["status"], row["problem"], row["steps"], row["rounds"]) == ("ok", None, 1, 2)
    assert (row["tokens_in"], row["tokens_out"], row["reserved"]) == (320, 32, 0)
    assert [(s["tool"], s["status"], s["grant"]) for s in row["step_log"]] == [(STATUS, "ok", "agentfn/test")]
    assert row["duration_ms"] is not None
    assert spent(loop.dsn, person.subject) == 352
    kept = str(row)
    assert said not in kept and argument not in kept and answered not in kept


def test_the_agents_steps_bound_the_calls_of_a_turn(loop, person):
    # The checker takes two steps: the third round is offered no tools, and its call is not made.
    loop.engine.script(
        {"calls": [call(service="s0")]},
        {"calls": [call(service="s1")]},
        {"text": "Done.", "calls": [call(service="s2")]},
    )
    _, events = turn(loop.client, person.token, "checker", "Check everything.")
    assert [s for s in steps(events) if s[2] != "started"] == [(1, STATUS, "ok"), (2, STATUS, "ok")]
    assert events[-1][0] == "done" and answer(events) == "Done."
    assert [r["tools"] for r in loop.engine.requests] == [[STATUS, "close_incident"]] * 2 + [None]
    assert calls_of(loop, STATUS) == [{"service": "s0"}, {"service": "s1"}]


def test_a_repeated_call_is_given_the_earlier_result_and_not_made_again(loop, person):
    loop.engine.script({"calls": [call(service="db")]}, {"calls": [call(service="db")]}, {"text": "Done."})
    _, events = turn(loop.client, person.token, "checker", "Check the database.")
    assert steps(events) == [(1, STATUS, "started"), (1, STATUS, "ok"), (2, STATUS, "repeat")]
    ran, repeated = (d for name, d in events if name == "step" and d["status"] != "started")
    assert repeated["repeat_of"] == 1 and repeated["result"] == ran["result"]
    assert calls_of(loop, STATUS) == [{"service": "db"}]
    # The model is told it was already done, and is offered no tools after the repeat.
    third = loop.engine.requests[2]
    assert third["tools"] is None and '"already_done": true, "step": 1' in third["messages"][-1]["content"]
    assert [s["status"] for s in record(loop.dsn, events[-1][1]["generation_id"])["step_log"]] == ["ok", "repeat"]


def ask_to_close(loop, who: Person, message: str = "Close the database incident."):
    """A turn whose model asks for close_incident, a tool that changes state: the step that waits, and the turn's end."""
    loop.engine.script({"calls": [call("close_incident", service="db")]}, {"text": "Closed."})
    response, events = turn(loop.client, who.token, "checker", message)
    assert response.status_code == 200
    (asked,) = [d for name, d in events if name == "step"]
    return asked, events[-1]


def test_a_call_that_changes_state_waits_for_approval_and_runs_in_the_next_turn(loop, person):
    message = "Close the database incident."
    asked, (name, done) = ask_to_close(loop, person, message)
    assert (asked["n"], asked["tool"], asked["status"], asked["arguments"]) == (
        1,
        "close_incident",
        "needs_approval",
        {"service": "db"},
    )
    assert asked["approval"] and name == "done" and done["pending"] == [1]
    assert len(loop.engine.requests) == 1  # the turn ended at the ask
    assert calls_of(loop, "close_incident") == []
    assert [s["status"] for s in record(loop.dsn, done["generation_id"])["step_log"]] == ["needs_approval"]

    response, events = turn(
        loop.client, person.token, "checker", message, approvals=[{"token": asked["approval"], "approve": True}]
    )
    assert response.status_code == 200
    assert steps(events) == [(1, "close_incident", "started"), (1, "close_incident", "ok")]
    assert events[-1][0] == "done" and answer(events) == "Closed."
    assert calls_of(loop, "close_incident") == [{"service": "db"}]


ELSEWHERE = {  # (whose request, which agent, its last message, the problem's type)
    "another_conversation": ("person", "checker", "Close the payments incident.", "approval-other-conversation"),
    "another_caller": ("other", "checker", None, "approval-not-yours"),
    "another_agent": ("person", "hasty", None, "approval-other-agent"),
}


@pytest.mark.parametrize("case", ELSEWHERE)
def test_an_approval_elsewhere_is_refused_whole_and_nothing_runs(loop, person, issuer, case):
    who, agent, content, kind = ELSEWHERE[case]
    message = "Close the database incident."
    asked, _ = ask_to_close(loop, person, message)
    caller = person if who == "person" else Person(issuer)
    loop.engine.script({"calls": [call("close_incident", service="payments")]}, {"text": "Closed."})
    before = spent(loop.dsn, caller.subject)
    response, _ = turn(
        loop.client, caller.token, agent, content or message, approvals=[{"token": asked["approval"], "approve": True}]
    )
    assert response.status_code == 403 and response.mimetype == "application/problem+json"
    assert response.json["type"].endswith("/" + kind)
    assert asked["approval"] not in response.get_data(as_text=True)
    assert loop.engine.requests == [] and calls_of(loop, "close_incident") == []
    assert spent(loop.dsn, caller.subject) == before
    # Not used up: in its own conversation the token still runs its call.
    loop.engine.script({"text": "Closed."})
    response, events = turn(
        loop.client, person.token, "checker", message, approvals=[{"token": asked["approval"], "approve": True}]
    )
    assert steps(events) == [(1, "close_incident", "started"), (1, "close_incident", "ok")]
    assert calls_of(loop, "close_incident") == [{"service": "db"}]


def test_memory_is_never_written_without_the_persons_approval(loop, person):
    loop.memory.notes = [{"id": "n1", "kind": "fact", "text": "Works on the ledger team."}]
    keep = call("remember", kind="fact", text="Likes tea.")
    loop.engine.script({"calls": [keep, call("forget", id="n1")]}, {"text": "Noted."})
    message = "Remember that I like tea, and forget the ledger."
    _, events = turn(loop.client, person.token, "keeper", message)
    assert events[0] == ("recall", {"entries": loop.memory.notes})
    asked = [d for name, d in events if name == "step"]
    assert [(d["tool"], d["status"]) for d in asked] == [("remember", "needs_approval"), ("forget", "needs_approval")]
    # What the person approves deleting: the note as this turn recalled it.
    assert asked[1]["note"] == {"id": "n1", "kind": "fact", "text": "Works on the ledger team."}
    assert events[-1][1]["pending"] == [1, 2]
    assert loop.memory.written() == []

    # The person approves keeping and declines forgetting: only the kept note reaches memory.
    answers = [{"token": asked[0]["approval"], "approve": True}, {"token": asked[1]["approval"], "approve": False}]
    _, events = turn(loop.client, person.token, "keeper", message, approvals=answers)
    assert [s for s in steps(events) if s[2] != "started"] == [(1, "remember", "ok"), (2, "forget", "declined")]
    assert loop.memory.written() == [("POST", "/v1/entries")]


def test_the_daily_budget_spent_mid_turn_ends_it_and_refuses_the_next_turn(loop, person):
    loop.engine.script({"calls": [call()], "usage": (IN_PROCESS_DAILY - 100, 20)}, {"text": "never read"})
    response, events = turn(loop.client, person.token, "checker", "Status?")
    assert response.status_code == 200
    name, error = events[-1]
    assert name == "error" and error["status"] == 429 and error["type"].endswith("/daily-tokens")
    assert steps(events)[-1] == (1, STATUS, "ok") and "done" not in [n for n, _ in events]
    assert len(loop.engine.requests) == 1  # the second round never reached the engine
    row = record(loop.dsn, error["generation_id"])
    assert (row["status"], row["problem"], row["reserved"]) == ("budget", 429, 0)
    assert spent(loop.dsn, person.subject) == IN_PROCESS_DAILY - 80

    loop.engine.script({"text": "never read"})
    again, events = turn(loop.client, person.token, "checker", "And now?")
    assert again.status_code == 429 and again.mimetype == "application/problem+json" and events is None
    assert again.json["type"].endswith("/daily-tokens") and 0 < int(again.headers["Retry-After"]) <= 86401
    assert loop.engine.requests == []


def test_the_deadline_ends_a_turn_whose_engine_is_slow(loop, person):
    loop.engine.script({"text": "too late", "delay": 5})
    started = time.monotonic()
    response, events = turn(loop.client, person.token, "hasty", "Quick?")  # the hasty agent allows one second
    took = time.monotonic() - started
    assert response.status_code == 200
    name, error = events[-1]
    assert name == "error" and error["status"] == 504 and error["type"].endswith("/deadline")
    assert took < 2.5, f"the turn took {took:.2f} s"
    row = record(loop.dsn, error["generation_id"])
    assert (row["status"], row["problem"], row["reserved"]) == ("deadline", 504, 0)


FAILURES = [  # (EngineFailed's kind, the engine's HTTP status, the problem's status)
    ("status", 500, 502),
    ("status", 429, 503),
    ("broken", None, 502),
    ("timeout", None, 504),
    ("malformed", None, 502),
]


@pytest.mark.parametrize(("kind", "status", "told"), FAILURES, ids=[f"{k}-{s}" for k, s, _ in FAILURES])
def test_an_engine_that_fails_after_a_step_ends_the_turn_with_a_problem(loop, person, kind, status, told):
    loop.engine.script({"calls": [call()]}, {"fail": kind, "status": status})
    response, events = turn(loop.client, person.token, "checker", "Status?")
    assert response.status_code == 200
    assert steps(events) == [(1, STATUS, "started"), (1, STATUS, "ok")]
    name, error = events[-1]
    assert name == "error" and error["status"] == told and error["type"].endswith("/engine")
    row = record(loop.dsn, error["generation_id"])
    assert (row["status"], row["problem"], row["steps"], row["reserved"]) == ("error", told, 1, 0)
