"""The loop's case table with the scripted engine, in both tool modes (native `tools`, constrained JSON).

Each row: what the engine is scripted to choose, what the platform behind the tool does, and the shape of
the stream the caller must see: the steps' statuses (and problem statuses), and how the turn ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import psycopg
import pytest
from support.model import TOOL_TIMEOUT, take_turn

MODES = {"native": "", "constrained": "-small"}
STATUS = {"name": "platform_status", "arguments": {}}


def call(name="platform_status", **arguments):
    return {"call": {"name": name, "arguments": arguments}}


ANSWER = {"text": "Here is what I found."}


@dataclass
class Case:
    id: str
    rounds: list
    steps: list = field(default_factory=list)  # (status, problem status or None) per step, in order
    end: tuple = ("done", None)  # ("done", None) or ("error", problem status)
    agent: str = "reviewer"
    fault: dict = field(default_factory=dict)  # set on the platform_status dev upstream
    caller: str = "person"
    modes: tuple = ("native", "constrained")
    within: float | None = None  # the whole turn's wall-clock bound, seconds
    requests: int | None = None  # engine requests the turn made
    answer: str = "Here is what I found."


CASES = [
    Case("plain_answer", [ANSWER], requests=1),
    Case("one_step", [call(), ANSWER], steps=[("ok", None)], requests=2),
    # The engine asks for a fifth and sixth call; the fifth round offers no tools, and its call is not run.
    Case(
        "four_call_bound",
        [call(service=f"s{i}") for i in range(6)] + [ANSWER],
        steps=[("ok", None)] * 4,
        requests=5,
        answer="",
    ),
    Case(
        "four_calls_then_answer", [call(service=f"s{i}") for i in range(4)] + [ANSWER], steps=[("ok", None)] * 4, requests=5
    ),
    # A call identical to one made in the turn is not made again: the model is given the earlier result, marked
    # as already done, the repeat is a step of its own (`repeat`), and the next round offers no tools.
    Case(
        "repeated_call_is_given_the_earlier_result",
        [call(), call(), ANSWER],
        steps=[("ok", None), ("repeat", None)],
        requests=3,
    ),
    Case(
        "repeat_with_keys_in_another_order",
        [call(service="llm"), {"call": {"name": "platform_status", "arguments": '{ "service" : "llm" }'}}, ANSWER],
        steps=[("ok", None), ("repeat", None)],
        requests=3,
    ),
    Case("invalid_argument", [call(service="NOT VALID!"), ANSWER], steps=[("error", 422)]),
    Case("unknown_argument", [call(colour="red"), ANSWER], steps=[("error", 422)]),
    # The same failed call asked again is not made (a repeat, given the earlier problem); the next round offers no
    # tools and the model answers.
    Case(
        "repeated_failed_call",
        [call(service="NOT VALID!")] * 3 + [ANSWER],
        steps=[("error", 422), ("repeat", None)],
        requests=3,
        answer="",
    ),
    Case(
        "failed_call_then_a_different_one",
        [call(service="NOT VALID!"), call(service="llm"), ANSWER],
        steps=[("error", 422), ("ok", None)],
        requests=3,
    ),
    Case(
        "arguments_not_json",
        [{"call": {"name": "platform_status", "arguments": "{not json"}}, ANSWER],
        steps=[("error", 422)],
        modes=("native",),
    ),
    Case(
        "reply_not_json",
        [{"call": {"name": "platform_status", "arguments": "{not json"}}],
        end=("error", 502),
        modes=("constrained",),
    ),
    Case("unknown_tool", [call("delete_everything"), ANSWER], steps=[("error", 404)]),
    Case("tool_not_granted_to_agent", [call("run_code", source="print(1)"), ANSWER], steps=[("error", 404)], agent="guide"),
    Case("tool_error", [call(), ANSWER], steps=[("error", 502)], fault={"fail_status": 500}),
    Case("tool_timeout", [call(), ANSWER], steps=[("error", 504)], fault={"delay_seconds": TOOL_TIMEOUT + 1.5}),
    Case("tool_403", [call(), ANSWER], steps=[("error", 403)], caller="stranger"),
    Case(
        "engine_fails_mid_stream",
        [{"text": "This answer breaks off somewhere", "chunks": 8, "disconnect_after": 3}],
        end=("error", 502),
    ),
    Case("engine_error_status", [{"status": 500}], end=("error", 502)),
    Case("engine_fails_after_a_step", [call(), {"status": 503}], steps=[("ok", None)], end=("error", 502)),
    Case(
        "deadline_in_tool",
        [call(), ANSWER],
        steps=[("error", 504)],
        end=("error", 504),
        agent="hasty",
        fault={"delay_seconds": 4},
        within=2.5,
    ),
    Case("deadline_in_engine", [{"text": "too late", "delay": 4}], end=("error", 504), agent="hasty", within=2.5),
    Case(
        "deadline_mid_answer",
        [{"text": "slow words one by one", "chunks": 6, "chunk_delay": 0.4}],
        end=("error", 504),
        agent="hasty",
        within=2.5,
    ),
    Case(
        "turn_tokens_spent",
        [{**call(), "usage": {"prompt_tokens": 1400, "completion_tokens": 50}}, ANSWER],
        steps=[("ok", None)],
        end=("error", 429),
        agent="frugal",
    ),
]


def shape(events):
    steps = [
        (d["status"], (d["result"] or {}).get("status") if d["status"] == "error" else None)
        for name, d in events
        if name == "step" and d["status"] != "started"
    ]
    last_name, last = events[-1]
    return steps, (last_name, last.get("status") if last_name == "error" else None)


ROWS = [(case, mode) for case in CASES for mode in MODES if mode in case.modes]


@pytest.mark.parametrize(("case", "mode"), ROWS, ids=[f"{c.id}-{m}" for c, m in ROWS])
def test_loop_case(case, mode, model, scripted_engine, upstreams, person, stranger, model_env):
    who = {"person": person, "stranger": stranger}[case.caller]
    controls = upstreams["platform_status"].app.extensions["agentfn.dev_upstream"]
    for key, value in case.fault.items():
        setattr(controls, key, value)
    sid = scripted_engine.script(*case.rounds)
    started = time.monotonic()
    response, events = take_turn(model.url, who, case.agent + MODES[mode], f"Check the platform. script:{sid}")
    took = time.monotonic() - started
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/event-stream")
    steps, end = shape(events)
    assert steps == case.steps
    assert end == case.end, events[-1]
    # Every step that runs is announced before it ends, in order, numbered from 1; a repeat runs nothing and is
    # one event, naming the step whose result it was given.
    step_events = [d for name, d in events if name == "step"]
    assert [(d["n"], d["status"] == "started") for d in step_events] == [
        (n, started_)
        for n, (status, _) in enumerate(case.steps, 1)
        for started_ in ((False,) if status == "repeat" else (True, False))
    ]
    for d in step_events:
        if d["status"] == "repeat":
            earlier = next(e for e in step_events if e["n"] == d["repeat_of"] and e["status"] != "started")
            assert d["result"] == earlier["result"] and d["repeat_of"] < d["n"]
    assert all(d["ms"] >= 0 for d in step_events if d["status"] != "started")
    if case.within is not None:
        assert took < case.within, f"the turn took {took:.2f} s"
    sent = scripted_engine.requests(sid)
    if case.requests is not None:
        assert len(sent) == case.requests
    # Tools are offered in every round but the one after the bound; a round without tools has no format either.
    offered = [
        "tools" in r or len(r.get("response_format", {}).get("json_schema", {}).get("schema", {}).get("anyOf", [])) > 1
        for r in sent
    ]
    if case.id == "four_call_bound":
        assert offered == [True] * 4 + [False]
    if case.end[0] == "done":
        done = events[-1][1]
        assert done["steps"] == len(case.steps) and done["cited"] == []
        assert "".join(d["text"] for n, d in events if n == "delta") == case.answer
        if case.steps and case.steps[0][0] == "error":
            # The model saw the failed step's problem in the next round's request.
            last_request = str(sent[-1]["messages"])
            assert '"ok": false' in last_request and f'"status": {case.steps[0][1]}' in last_request
        if ("repeat", None) in case.steps:
            # The model was told the repeat was already done, in the `tool` role, with the earlier result.
            told = [m for m in sent[case.steps.index(("repeat", None)) + 1]["messages"] if m["role"] == "tool"]
            assert '"already_done": true, "step": 1' in told[-1]["content"]
    _record_matches(model_env, events, case)


def _record_matches(model_env, events, case):
    generation = events[-1][1]["generation_id"]
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        row = conn.execute(
            "SELECT status, problem, steps, step_log, tokens_in, tokens_out, reserved, duration_ms "
            "FROM generations WHERE id = %s",
            (generation,),
        ).fetchone()
    status, problem, steps, step_log, tokens_in, tokens_out, reserved, duration = row
    expected = {"done": "ok"}.get(case.end[0]) or {504: "deadline", 429: "budget"}.get(case.end[1], "error")
    assert (status, problem) == (expected, case.end[1])
    assert steps == len(case.steps) and [s["status"] for s in step_log] == [s for s, _ in case.steps]
    assert all(set(s) == {"tool", "status", "ms", "grant"} for s in step_log)
    # The grant the call was made under (the audit's column); a name the model made up was under none.
    assert all(s["grant"] == (None if s["tool"] == "(unknown)" else "agentfn/test") for s in step_log)
    assert {s["tool"] for s in step_log} <= {"platform_status", "(unknown)", "run_code"}
    assert reserved == 0 and duration is not None and tokens_in > 0
