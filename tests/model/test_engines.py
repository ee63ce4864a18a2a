"""Pure parts of the loop: the constrained reply decoder, the tier configuration, citations, fitting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfn.model import prompt
from agentfn.model.engines import AnswerStream, EngineFailed, constrained_schema, tiers_from_env
from agentfn.model.tool_table import Tool, _builtins

ROOT = Path(__file__).resolve().parents[2]

ANSWERS = ["Plain words.", 'Quotes " and \\ backslashes', "Accents: čćžšđ, emoji 😀, tab\tand\nnewline", ""]
SIZES = [1, 2, 3, 5, 8, 1000]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("ascii_only", [True, False])
@pytest.mark.parametrize("answer", ANSWERS, ids=["plain", "escapes", "unicode", "empty"])
def test_an_answer_streams_out_of_its_json_in_any_chunking(answer, ascii_only, size):
    reply = json.dumps({"answer": answer}, ensure_ascii=ascii_only)
    decoder, out = AnswerStream(), ""
    for i in range(0, len(reply), size):
        out += decoder.feed(reply[i : i + size])
    assert decoder.call({"x"}) is None
    if decoder.state == "late-answer":
        out += decoder.answer[-1]
    assert out == answer


@pytest.mark.parametrize("size", SIZES)
def test_a_tool_call_comes_out_whole_at_the_end(size):
    reply = json.dumps({"tool": "platform_status", "arguments": {"service": "llm"}})
    decoder, out = AnswerStream(), ""
    for i in range(0, len(reply), size):
        out += decoder.feed(reply[i : i + size])
    request = decoder.call({"platform_status"})
    assert out == "" and request.name == "platform_status" and request.arguments == {"service": "llm"}


@pytest.mark.parametrize("reply", ['{"tool": "x", "arguments": {', '{"neither": 1}', '{"tool": 5, "arguments": {}}'])
def test_a_reply_outside_the_format_fails_the_round(reply):
    decoder = AnswerStream()
    decoder.feed(reply)
    with pytest.raises(EngineFailed):
        decoder.call({"x"})


def test_an_engine_that_ignores_the_format_is_read_as_plain_text():
    decoder = AnswerStream()
    assert decoder.feed("Just") + decoder.feed(" text.") == "Just text."
    assert decoder.call(set()) is None


def test_the_constrained_schema_offers_an_answer_or_one_call_of_each_tool():
    tool = Tool(
        "platform_status",
        "d",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"service": {"type": "string", "pattern": "^[a-z]+$", "description": "x"}},
        },
        True,
        True,
        "function",
    )
    schema = constrained_schema([tool])
    assert [b["required"] for b in schema["anyOf"]] == [["answer"], ["tool", "arguments"]]
    arguments = schema["anyOf"][1]["properties"]["arguments"]
    assert arguments["properties"]["service"] == {"type": "string"}  # no pattern for the grammar; checked after


def test_tiers_come_from_the_environment():
    tiers = tiers_from_env(
        {
            "AGENTFN_TIERS": "fast, deep",
            "AGENTFN_TIER_FAST_URL": "http://127.0.0.1:1/v1",
            "AGENTFN_TIER_FAST_TOOL_MODE": "constrained",
            "AGENTFN_TIER_DEEP_URL": "http://x:2/v1/",
            "AGENTFN_TIER_DEEP_DEADLINE_SECONDS": "120",
            "AGENTFN_TIER_DEEP_TEMPERATURE": "0",
        }
    )
    assert tiers["fast"].tool_mode == "constrained" and tiers["fast"].deadline == 60
    assert tiers["deep"].url == "http://x:2/v1" and tiers["deep"].deadline == 120 and tiers["deep"].temperature == 0
    for env in (
        {"AGENTFN_TIERS": "fast"},
        {"AGENTFN_TIER_FAST_URL": "http://a/v1", "AGENTFN_TIER_FAST_TOOL_MODE": "magic"},
        {"AGENTFN_TIERS": "Fast!", "AGENTFN_TIER_FAST!_URL": "http://a"},
        {"AGENTFN_TIERS": " , "},
    ):
        with pytest.raises(RuntimeError):
            tiers_from_env(env)


def test_fit_keeps_the_newest_messages_and_starts_with_the_person():
    messages = [
        {"role": "user", "content": "a" * 300},
        {"role": "assistant", "content": "b" * 300},
        {"role": "user", "content": "c" * 30},
    ]
    assert prompt.fit(messages, 10_000) == messages
    assert prompt.fit(messages, 150) == messages[2:]
    assert prompt.fit(messages, 1) == messages[2:]  # the last message always


NOTES = ["5f0c2a91-3b7e-4d16-9a2c-7e1f04b8d2a6", "c83e61d4-0f25-4a9b-8d47-2b6a9e13f5c0"]
CITED = {
    # the reply as the engine streamed it, the shown ids its `cited` names (None: it has no `cited`)
    "by_short_ids": ('{"answer": "Yes.", "cited": ["c83e61d4", "5f0c2a91", "c83e61d4"]}', [NOTES[1], NOTES[0]]),
    "none": ('{"answer": "Yes.", "cited": []}', []),
    "a_head_not_shown_is_dropped": ('{"answer": "Yes.", "cited": ["deadbeef"]}', []),
    "no_cited_at_all": ('{"answer": "Yes."}', None),
    "cut_short_by_the_bound": ('{"answer": "Yes.", "cited": ["c83e', []),
}


@pytest.mark.parametrize(("reply", "ids"), CITED.values(), ids=CITED.keys())
def test_a_constrained_answer_names_the_notes_it_used_by_their_short_ids(reply, ids):
    decoder = AnswerStream()
    streamed = "".join(decoder.feed(reply[i : i + 5]) for i in range(0, len(reply), 5))
    assert streamed == "Yes."
    assert decoder.cited(NOTES) == ids


def reviewer_tools() -> list[Tool]:
    """The code reviewer's tools as the tool table lists them: open_page and the memory tools, and two tool functions."""
    tools = list(_builtins().values())
    for name in ("run_code", "platform_status"):
        d = json.loads((ROOT / "src" / "agentfn" / name / "tool.json").read_text())
        tools.append(Tool(d["name"], d["description"], d["input_schema"], False, False, "function"))
    return tools


@pytest.mark.parametrize(("context_tokens", "worked"), [(None, True), (8192, True), (4096, True), (2048, False)])
def test_the_worked_replies_are_shown_only_where_a_turn_still_fits_beside_them(context_tokens, worked):
    # SmolLM2's context is 2,048 tokens: the system prompt with its worked replies filled it, and every turn failed.
    system = prompt.system(
        "Reviews code.",
        "2026-12-07",
        tools=reviewer_tools(),
        constrained=True,
        memory_tools=True,
        notes=True,
        context_tokens=context_tokens,
    )
    assert ("Examples:" in system) is worked
    if context_tokens is not None:
        assert prompt.likely(system) + prompt.TURN_ROOM <= context_tokens
