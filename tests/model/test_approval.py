"""The person approves what changes state: through the turn door, with the scripted engine, in both tool modes.

A call of a tool that changes state (remember, forget, run_code), whose grant does not waive approval, is not
run: the turn streams a `needs_approval` step with the exact arguments and a signed token, and ends (`done`
says which steps are pending). The next turn request carries `approvals` with the same conversation; each
token is checked before anything runs, runs only in the conversation that asked for it, and is good once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time

import jwt
import psycopg
import pytest
import requests
from support.model import Person, take_turn

from agentfn.model.language import UNNOTED

MODES = {"native": "", "constrained": "-small"}
NOTE = {"kind": "fact", "text": "I work on the ledger team."}
KEEP = {"call": {"name": "remember", "arguments": NOTE}}
ANSWER = {"text": "Kept."}


def mine(memory, who) -> list[dict]:
    return requests.get(memory.url + "/v1/entries", headers=who.headers, timeout=10).json()["entries"]


def steps(events) -> list[tuple[int, str, str]]:
    return [(d["n"], d["tool"], d["status"]) for name, d in events if name == "step"]


def record(model_env, generation: str) -> tuple[str, list[dict]]:
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        return conn.execute("SELECT status, step_log FROM generations WHERE id = %s", (generation,)).fetchone()


def spent(model_env, subject: str) -> int:
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        row = conn.execute("SELECT coalesce(sum(spent), 0) FROM token_budgets WHERE subject = %s", (subject,)).fetchone()
    return row[0]


def ask(model, scripted_engine, person, agent="asker", rounds=(KEEP, ANSWER)):
    """A turn that asks for approval: (its message, its events, the script id)."""
    sid = scripted_engine.script(*rounds)
    message = f"Please keep that I work on the ledger team. script:{sid}"
    response, events = take_turn(model.url, person, agent, message)
    assert response.status_code == 200, response.text
    return message, events, sid


@pytest.mark.parametrize("mode", MODES)
def test_a_call_that_changes_state_waits_for_approval_and_runs_as_step_one_of_the_next_turn(
    model, scripted_engine, memory, person, model_env, model_logs, mode
):
    message, events, sid = ask(model, scripted_engine, person, "asker" + MODES[mode])
    asked = [d for name, d in events if name == "step"]
    assert [(d["n"], d["tool"], d["status"], d["arguments"]) for d in asked] == [(1, "remember", "needs_approval", NOTE)]
    done = events[-1][1]
    # The token: bound to the caller, the agent, the tool, the canonical arguments, the asking generation and its
    # conversation (a keyed digest: not the plain hash of what was said).
    claims = jwt.decode(asked[0]["approval"], options={"verify_signature": False})
    canonical = json.dumps(NOTE, sort_keys=True, separators=(",", ":")).encode()
    said = json.dumps([{"role": "user", "content": message}], sort_keys=True, separators=(",", ":")).encode()
    assert len(claims["conv"]) == 64 and claims["conv"] != hashlib.sha256(said).hexdigest()
    assert (claims["sub"], claims["agent"], claims["tool"], claims["args"], claims["gen"]) == (
        person.subject,
        "asker" + MODES[mode],
        "remember",
        NOTE,
        done["generation_id"],
    )
    assert claims["args_sha256"] == hashlib.sha256(canonical).hexdigest() and claims["exp"] - claims["iat"] == 300
    assert claims["jti"] and claims["aud"] == "agentfn-approval"
    assert events[-1][0] == "done" and done["pending"] == [1] and done["steps"] == 1
    assert len(scripted_engine.requests(sid)) == 1  # the turn ended at the ask: no round after it
    assert mine(memory, person) == []  # nothing kept yet
    assert record(model_env, done["generation_id"]) == (
        "ok",
        [{"tool": "remember", "status": "needs_approval", "ms": 0.0, "grant": "agentfn/test"}],
    )

    response, events = take_turn(
        model.url, person, "asker" + MODES[mode], message, approvals=[{"token": asked[0]["approval"], "approve": True}]
    )
    assert response.status_code == 200, response.text
    assert steps(events) == [(1, "remember", "started"), (1, "remember", "ok")]
    assert events[-1][0] == "done" and events[-1][1]["pending"] == []
    assert "".join(d["text"] for name, d in events if name == "delta") == "Kept."
    assert [e["text"] for e in mine(memory, person)] == [NOTE["text"]]
    # The model was shown its call and the result, in the tool role, in the round after the approved step.
    told = scripted_engine.requests(sid)[1]["messages"]
    assert told[-1]["role"] == "tool" and '"ok": true' in told[-1]["content"]
    # Neither the token nor the person's words reach the log.
    log = (model_logs / "model.log").read_text()
    assert asked[0]["approval"] not in log and NOTE["text"] not in log
    ran = next(d for name, d in events if name == "step" and d["status"] == "ok")
    assert ran["result"]["existing"] is False  # memory kept a new entry (not one the person already had)
    assert record(model_env, events[-1][1]["generation_id"])[1] == [
        {"tool": "remember", "status": "ok", "ms": ran["ms"], "grant": "agentfn/test"}
    ]


def test_a_constrained_engine_has_seen_the_answer_after_a_kept_note(model, scripted_engine, memory, person):
    # Told to say "I don't have that noted" of what no note holds, the offline model said it right after keeping a
    # note, until its worked replies showed a keep's result (as a turn tells it) and the answer after it.
    _, _, sid = ask(model, scripted_engine, person, "asker-small")
    system = scripted_engine.requests(sid)[0]["messages"][0]["content"]
    after = system[system.index('<result step="1" tool="remember">\n{"ok": true, "content": {') :]
    reply = json.loads(after.split("Reply: ", 1)[1].splitlines()[0])
    assert list(reply) == ["answer"] and reply["answer"] not in UNNOTED.values()


@pytest.mark.parametrize("mode", MODES)
def test_a_declined_call_is_a_declined_step_and_the_model_is_told(model, scripted_engine, memory, person, model_env, mode):
    message, events, sid = ask(model, scripted_engine, person, "asker" + MODES[mode], (KEEP, {"text": "I kept nothing."}))
    token = next(d["approval"] for name, d in events if name == "step")
    response, events = take_turn(
        model.url, person, "asker" + MODES[mode], message, approvals=[{"token": token, "approve": False}]
    )
    assert response.status_code == 200, response.text
    assert steps(events) == [(1, "remember", "declined")]
    assert mine(memory, person) == []
    told = scripted_engine.requests(sid)[1]["messages"][-1]
    assert told["role"] == "tool" and "/declined" in told["content"] and "declined" in told["content"]
    assert record(model_env, events[-1][1]["generation_id"])[1] == [
        {"tool": "remember", "status": "declined", "ms": 0.0, "grant": "agentfn/test"}
    ]


def test_a_waived_grant_runs_the_call_without_asking(model, scripted_engine, memory, person):
    # The keeper's grant of remember waives approval; the asker's does not (tests/support/model.py).
    _, events, _ = ask(model, scripted_engine, person, "keeper")
    assert steps(events) == [(1, "remember", "started"), (1, "remember", "ok")]
    assert [e["text"] for e in mine(memory, person)] == [NOTE["text"]]


def test_a_call_that_breaks_a_rule_is_refused_without_asking(model, scripted_engine, memory, person):
    # A forget of an id never shown, and a remember with arguments outside its schema: nothing to approve.
    rounds = (
        {
            "calls": [
                {"name": "forget", "arguments": {"id": "not-shown-anywhere"}},
                {"name": "remember", "arguments": {"kind": "mood", "text": "x"}},
            ]
        },
        {"text": "No."},
    )
    _, events, _ = ask(model, scripted_engine, person, "asker", rounds)
    ended = [d for name, d in events if name == "step" and d["status"] != "started"]
    assert [(d["tool"], d["status"], d["result"]["status"]) for d in ended] == [
        ("forget", "error", 404),
        ("remember", "error", 422),
    ]
    assert events[-1][1]["pending"] == []


def _forged(token: str, key: bytes) -> str:
    return jwt.encode(jwt.decode(token, options={"verify_signature": False}), key, algorithm="HS256")


def _altered(token: str, _key: bytes) -> str:
    head, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["args"] = {**claims["args"], "text": "I work for the competitor."}
    return ".".join([head, base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode(), signature])


def _expired(token: str, key: bytes) -> str:
    claims = jwt.decode(token, options={"verify_signature": False})
    return jwt.encode({**claims, "iat": int(time.time()) - 600, "exp": int(time.time()) - 5}, key, algorithm="HS256")


BAD_TOKENS = [  # (case, how the token is made, whose request, which agent, status, problem type)
    ("forged", lambda t, k: _forged(t, secrets.token_bytes(48)), "person", "asker", 403, "approval-invalid"),
    ("altered", _altered, "person", "asker", 403, "approval-invalid"),
    ("expired", _expired, "person", "asker", 403, "approval-expired"),
    ("not_a_token", lambda t, k: "not.a.token", "person", "asker", 403, "approval-invalid"),
    ("another_subjects", lambda t, k: t, "other", "asker", 403, "approval-not-yours"),
    ("another_agents", lambda t, k: t, "person", "keeper", 403, "approval-other-agent"),
    ("replayed", lambda t, k: t, "person", "asker", 409, "approval-used"),
]


@pytest.mark.parametrize(("case", "make", "who", "agent", "status", "kind"), BAD_TOKENS, ids=[c[0] for c in BAD_TOKENS])
def test_a_bad_approval_refuses_the_whole_request_and_nothing_runs(
    model, scripted_engine, memory, person, issuer, model_env, approval_key_file, case, make, who, agent, status, kind
):
    # The conversation that asked comes back with the token: only the token is bad.
    message, events, sid = ask(model, scripted_engine, person, rounds=(KEEP, ANSWER, ANSWER))
    genuine = next(d["approval"] for name, d in events if name == "step")
    if case == "replayed":
        response, _ = take_turn(model.url, person, "asker", message, approvals=[{"token": genuine, "approve": False}])
        assert response.status_code == 200
    caller = person if who == "person" else Person(issuer)
    before, engine_rounds = spent(model_env, caller.subject), len(scripted_engine.requests(sid))
    token = make(genuine, approval_key_file.read_bytes().strip())
    response, events = take_turn(model.url, caller, agent, message, approvals=[{"token": token, "approve": True}])
    assert response.status_code == status, response.text
    problem = response.json()
    assert response.headers["Content-Type"] == "application/problem+json"
    assert problem["status"] == status and problem["type"].endswith("/" + kind)
    assert token not in response.text
    assert len(scripted_engine.requests(sid)) == engine_rounds and mine(memory, person) == [] and mine(memory, caller) == []
    assert spent(model_env, caller.subject) == before


ELSEWHERE = {  # another conversation than the one that asked: (the history, the person's last message)
    "other_words": lambda message, sid: ((), f"Please keep that I work on the payments team. script:{sid}"),
    "the_same_words_after_another_history": lambda message, sid: (
        [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi, how can I help?"}],
        message,
    ),
    "the_conversation_gone_on": lambda message, sid: (
        [{"role": "user", "content": message}, {"role": "assistant", "content": "Shall I keep it?"}],
        f"Yes, keep it. script:{sid}",
    ),
}


@pytest.mark.parametrize("case", ELSEWHERE)
def test_an_approval_runs_only_in_the_conversation_that_asked_for_it(
    model, scripted_engine, memory, person, model_env, case
):
    message, events, asked = ask(model, scripted_engine, person)
    token = next(d["approval"] for name, d in events if name == "step")
    before = spent(model_env, person.subject)
    sid = scripted_engine.script(
        {"call": {"name": "remember", "arguments": {"kind": "fact", "text": "Works on payments."}}}, ANSWER
    )
    history, content = ELSEWHERE[case](message, sid)
    response, _ = take_turn(
        model.url, person, "asker", content, history=history, approvals=[{"token": token, "approve": True}]
    )
    assert response.status_code == 403, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("/approval-other-conversation") and "conversation" in problem["detail"]
    assert token not in response.text
    # Nothing ran, nothing was spent and nothing used up: the token still runs its call in its own conversation.
    assert scripted_engine.requests(sid) == [] and len(scripted_engine.requests(asked)) == 1
    assert mine(memory, person) == [] and spent(model_env, person.subject) == before
    response, events = take_turn(model.url, person, "asker", message, approvals=[{"token": token, "approve": True}])
    assert response.status_code == 200, response.text
    assert steps(events) == [(1, "remember", "started"), (1, "remember", "ok")]
    assert [e["text"] for e in mine(memory, person)] == [NOTE["text"]]


def test_an_approval_used_by_two_requests_at_once_runs_once(model, scripted_engine, memory, person):
    message, events, _ = ask(model, scripted_engine, person, rounds=(KEEP, ANSWER, ANSWER))
    token = next(d["approval"] for name, d in events if name == "step")
    answers: list[int] = []

    def use():
        response, _ = take_turn(model.url, person, "asker", message, approvals=[{"token": token, "approve": True}])
        answers.append(response.status_code)

    racers = [threading.Thread(target=use) for _ in range(4)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert sorted(answers) == [200, 409, 409, 409]
    assert [e["text"] for e in mine(memory, person)] == [NOTE["text"]]


def test_the_same_approval_twice_in_one_request_is_refused(model, scripted_engine, memory, person):
    message, events, _ = ask(model, scripted_engine, person)
    token = next(d["approval"] for name, d in events if name == "step")
    response, _ = take_turn(
        model.url, person, "asker", message, approvals=[{"token": token, "approve": True}, {"token": token, "approve": True}]
    )
    assert response.status_code == 422 and response.json()["type"].endswith("/approvals-repeated")
    assert mine(memory, person) == []


def test_an_approved_call_is_not_repeated_when_the_model_asks_for_it_again(model, scripted_engine, memory, person):
    # The approving turn's model asks for the same remember again: a repeat, given step 1's result, not a second ask.
    message, events, sid = ask(model, scripted_engine, person, rounds=(KEEP, KEEP, ANSWER))
    token = next(d["approval"] for name, d in events if name == "step")
    _, events = take_turn(model.url, person, "asker", message, approvals=[{"token": token, "approve": True}])
    assert steps(events) == [(1, "remember", "started"), (1, "remember", "ok"), (2, "remember", "repeat")]
    assert events[-1][1]["pending"] == []
    assert len(mine(memory, person)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_second_remember_in_a_turn_is_refused_as_the_tools_problem(model, scripted_engine, memory, person, mode):
    rounds = (KEEP, {"call": {"name": "remember", "arguments": {"kind": "fact", "text": "I also like tea."}}}, ANSWER)
    _, events, sid = ask(model, scripted_engine, person, "keeper" + MODES[mode], rounds)
    ended = [d for name, d in events if name == "step" and d["status"] != "started"]
    assert [(d["status"], (d["result"] or {}).get("type", "").rsplit("/", 1)[-1]) for d in ended] == [
        ("ok", ""),
        ("error", "once-per-turn"),
    ]
    assert [e["text"] for e in mine(memory, person)] == [NOTE["text"]]
    assert "once-per-turn" in scripted_engine.requests(sid)[2]["messages"][-1]["content"]


def test_a_second_forget_in_a_turn_is_refused_as_the_tools_problem(model, scripted_engine, memory, person):
    session = requests.Session()
    session.headers.update(person.headers)
    kept = [
        session.post(memory.url + "/v1/entries", json={"kind": "preference", "text": text, "source": "test"}).json()
        for text in ("Prefers tabs in Go code.", "Prefers spaces in Python code.")
    ]
    rounds = (
        {"call": {"name": "forget", "arguments": {"id": kept[0]["id"]}}},
        {"call": {"name": "forget", "arguments": {"id": kept[1]["id"]}}},
        ANSWER,
    )
    sid = scripted_engine.script(*rounds)
    _, events = take_turn(model.url, person, "keeper", f"Forget my code style notes (tabs, spaces). script:{sid}")
    assert {kept[0]["id"], kept[1]["id"]} <= {e["id"] for e in events[0][1]["entries"]}
    ended = [d for name, d in events if name == "step" and d["status"] != "started"]
    assert [(d["status"], (d["result"] or {}).get("type", "").rsplit("/", 1)[-1]) for d in ended] == [
        ("ok", ""),
        ("error", "once-per-turn"),
    ]
    assert [e["id"] for e in mine(memory, person)] == [kept[1]["id"]]


@pytest.fixture(scope="module")
def keyless_model(model_env, model_logs):
    """The model function without an approval key (AGENTFN_APPROVAL_KEY_FILE unset)."""
    from agentfn.devstack.harness.servers import Gunicorn

    env = {k: v for k, v in model_env.items() if k != "AGENTFN_APPROVAL_KEY_FILE"}
    server = Gunicorn("agentfn.model.app:create_app()", env, model_logs / "model-keyless.log")
    server.start()
    yield server
    server.stop()


def test_without_an_approval_key_a_call_that_needs_approval_fails_and_nothing_runs(
    keyless_model, model, scripted_engine, memory, person
):
    message, events, _ = ask(keyless_model, scripted_engine, person, rounds=(KEEP, {"text": "Could not ask."}))
    ended = [d for name, d in events if name == "step" and d["status"] != "started"]
    assert [(d["status"], d["result"]["status"], d["result"]["type"].rsplit("/", 1)[-1]) for d in ended] == [
        ("error", 503, "approvals-unavailable")
    ]
    assert mine(memory, person) == [] and events[-1][1]["pending"] == []
    _, asked, _ = ask(model, scripted_engine, person)  # a token from the keyed function
    token = next(d["approval"] for name, d in asked if name == "step")
    response, _ = take_turn(keyless_model.url, person, "asker", message, approvals=[{"token": token, "approve": True}])
    assert response.status_code == 503 and response.json()["type"].endswith("/approvals-unavailable")
    assert mine(memory, person) == []


def test_remember_of_a_note_the_person_has_says_existing_and_keeps_no_second(model, scripted_engine, memory, person):
    requests.post(memory.url + "/v1/entries", headers=person.headers, timeout=10, json={**NOTE, "source": "test"})
    sid = scripted_engine.script(
        {"call": {"name": "remember", "arguments": {"kind": "fact", "text": "i work on the LEDGER team"}}}, ANSWER
    )
    _, events = take_turn(model.url, person, "keeper", f"Keep that I work on the ledger team. script:{sid}")
    ran = next(d for name, d in events if name == "step" and d["status"] == "ok")
    assert ran["result"]["existing"] is True and ran["result"]["text"] == NOTE["text"]
    assert '"existing": true' in scripted_engine.requests(sid)[1]["messages"][-1]["content"]  # the model is told
    assert [e["text"] for e in mine(memory, person)] == [NOTE["text"]]


@pytest.mark.parametrize("mode", MODES)
def test_a_forget_that_waits_for_approval_shows_the_notes_text(model, scripted_engine, memory, person, model_logs, mode):
    kept = requests.post(
        memory.url + "/v1/entries",
        headers=person.headers,
        json={"kind": "preference", "text": "Prefers tabs in Go code.", "source": "test"},
        timeout=10,
    ).json()
    sid = scripted_engine.script({"call": {"name": "forget", "arguments": {"id": kept["id"]}}}, ANSWER)
    _, events = take_turn(model.url, person, "asker" + MODES[mode], f"Forget my note about tabs in Go. script:{sid}")
    (asked,) = [d for name, d in events if name == "step"]
    assert (asked["status"], asked["arguments"]) == ("needs_approval", {"id": kept["id"]})
    # What the person approves deleting, beside its id: the note as this turn recalled it.
    assert asked["note"] == {"id": kept["id"], "kind": "preference", "text": "Prefers tabs in Go code."}
    assert "Prefers tabs in Go code." not in (model_logs / "model.log").read_text()
    assert [e["id"] for e in mine(memory, person)] == [kept["id"]]  # nothing forgotten yet
