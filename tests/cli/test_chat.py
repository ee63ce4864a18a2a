"""`agentfn chat` as a person runs it: a subprocess against the real gateway, memory and model function, the engine the
scripted one (a test double of an LLM's choices): steps, citations, approval cards, and what a card shows of a hostile
name or note."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import unicodedata

import pytest
import requests
from support.format_characters import FORMAT_CHARACTERS, HIDDEN
from support.model import AGENTFN, door, persons_words

NOTE = "Prefers four spaces for indentation in Python code."
QUESTION = "How should my Python code be formatted and indented?"
SUMMARY = "The person asked how to indent Python code and settled on four spaces for each level."


def test_chat_through_a_pipe_shows_steps_recall_citations_and_ends_as_an_episode(cli, gateway, scripted_engine, person):
    note = requests.post(
        gateway.url + "/v1/entries",
        headers=person.headers,
        timeout=30,
        json={"kind": "preference", "text": NOTE, "source": "test"},
    ).json()
    sid = scripted_engine.script(
        {"call": {"name": "platform_status", "arguments": {"service": "llm"}}},
        {"text": f"Use four spaces for each level [{note['id']}]."},
        {"text": SUMMARY},
    )
    done = cli("chat", "reviewer", stdin=f"/help\n{QUESTION} script:{sid}\n/end Thanks, four spaces it is.\n/quit\n")
    assert done.returncode == 0, done.stderr
    shown = done.stdout
    assert "/end" in shown and "/quit" in shown  # the help
    assert "step 1 · platform_status" in shown and "started -> ok" in shown and " ms" in shown
    assert f"agent> Use four spaces for each level [{note['id']}]." in shown
    recalled = next(line for line in shown.splitlines() if note["id"][:8] in line and NOTE in line)
    assert "✓" in recalled and "preference" in recalled
    assert "tokens" in shown and "generation" in shown  # done's usage and timing
    (episode,) = door(gateway, person, "/v1/entries", kind="episode").json()["entries"]
    assert episode["text"] == SUMMARY
    assert f"episode kept {episode['id']}" in shown and SUMMARY in shown
    sent = scripted_engine.requests(sid)
    assert len(sent) == 3 and "Thanks, four spaces it is." in sent[2]["messages"][-1]["content"]
    assert "Use four spaces for each level" in sent[2]["messages"][-1]["content"]  # the whole conversation
    assert shown.index("step 1") < shown.index("agent> ") < shown.index("✓") < shown.index("episode kept")


def test_chat_keeps_the_conversation_and_sends_it_whole(cli, scripted_engine):
    sid = scripted_engine.script({"text": "Blue."}, {"text": "You said blue."})
    done = cli("chat", "guide", stdin=f"Pick a colour. script:{sid}\nWhat did you pick?\n")  # EOF leaves
    assert done.returncode == 0 and "agent> Blue." in done.stdout and "agent> You said blue." in done.stdout
    second = [m for m in scripted_engine.requests(sid)[1]["messages"] if m["role"] in ("user", "assistant")]
    assert [(m["role"], persons_words(m["content"])) for m in second] == [
        ("user", f"Pick a colour. script:{sid}"),
        ("assistant", "Blue."),
        ("user", "What did you pick?"),
    ]


def test_chat_json_prints_the_events_as_json_lines(cli, scripted_engine):
    sid = scripted_engine.script({"call": {"name": "platform_status", "arguments": {}}}, {"text": "All fine."})
    done = cli("chat", "reviewer", "--json", "-m", f"Is the platform up? script:{sid}")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["event"] for e in events] == ["recall", "step", "step", "delta", "delta", "delta", "done"]
    assert [e["data"]["status"] for e in events if e["event"] == "step"] == ["started", "ok"]
    assert "".join(e["data"]["text"] for e in events if e["event"] == "delta") == "All fine."


def test_chat_shows_a_turn_that_fails_as_its_problem(cli, scripted_engine):
    sid = scripted_engine.script({"status": 500}, {"status": 500}, {"status": 500})
    done = cli("chat", "guide", "-m", f"Hello. script:{sid}")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == ["Engine failed", "the engine answered HTTP 500"], done.stderr


def test_a_turn_that_failed_is_still_part_of_the_session_it_ends(cli, gateway, scripted_engine, person):
    sid = scripted_engine.script({"status": 500}, {"text": SUMMARY})
    done = cli("chat", "reviewer", stdin=f"How should I indent Python? script:{sid}\n/end\n/quit\n")
    assert done.returncode == 0 and "Engine failed" in done.stderr and "episode kept" in done.stdout
    (episode,) = door(gateway, person, "/v1/entries", kind="episode").json()["entries"]
    assert episode["text"] == SUMMARY
    assert "How should I indent Python?" in scripted_engine.requests(sid)[-1]["messages"][-1]["content"]


def test_ctrl_c_stops_a_streaming_answer_and_the_chat_goes_on(gateway, scripted_engine, person):
    sid = scripted_engine.script({"text": "One two three four five six.", "chunks": 6, "chunk_delay": 1.5})
    env = {**os.environ, "AGENTFN_URL": gateway.url, "AGENTFN_TOKEN": person.token, "COLUMNS": "200"}
    process = subprocess.Popen(
        [str(AGENTFN), "chat", "guide"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    process.stdin.write(f"Count. script:{sid}\n")
    process.stdin.flush()
    seen = ""
    deadline = time.monotonic() + 30
    while "agent> " not in seen and time.monotonic() < deadline:
        seen += process.stdout.read(1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate("/quit\n", timeout=30)
    assert process.returncode == 0 and "Traceback" not in err + out
    assert "(answer stopped)" in out and "six." not in seen + out


KEEP = {"call": {"name": "remember", "arguments": {"kind": "fact", "text": "I work on the ledger team."}}}


@pytest.mark.parametrize(
    ("typed", "kept", "shown"),
    [("y", True, "remember: ok"), ("", False, "declined"), ("n", False, "declined")],
    ids=["y", "enter", "n"],
)
def test_chat_shows_the_approval_card_and_asks_before_a_call_that_changes_state(
    cli, gateway, scripted_engine, person, typed, kept, shown
):
    sid = scripted_engine.script(KEEP, {"text": "Kept." if kept else "Kept nothing."})
    done = cli("chat", "asker", stdin=f"Keep that I work on the ledger team. script:{sid}\n{typed}\n")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "step 1 · remember" in out and "needs your approval" in out
    assert '"text": "I work on the ledger team."' in out and "approve? [y/N]" in out
    assert out.index("needs your approval") < out.index("approve? [y/N]")
    texts = [e["text"] for e in door(gateway, person, "/v1/entries").json()["entries"]]
    assert texts == (["I work on the ledger team."] if kept else [])
    assert ("agent> Kept." if kept else "agent> Kept nothing.") in done.stdout
    assert ("started -> ok" in out) is kept and ("status declined" in out) is not kept
    # The approving request was the same conversation: the person's message, then the answer to it.
    second = scripted_engine.requests(sid)[1]["messages"]
    assert [persons_words(m["content"]) for m in second if m["role"] == "user"] == [
        f"Keep that I work on the ledger team. script:{sid}"
    ]


def test_a_command_typed_at_the_approval_prompt_declines_the_call_then_runs(cli, gateway, scripted_engine, person):
    sid = scripted_engine.script(KEEP, {"text": "Kept nothing."})
    done = cli("chat", "asker", stdin=f"Keep that I work on the ledger team. script:{sid}\n/help\n/quit\n")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "status declined" in out and "agent> Kept nothing." in done.stdout
    assert out.index("agent> Kept nothing.") < out.index("/end [closing words]")  # /help ran after the turn
    assert door(gateway, person, "/v1/entries").json()["entries"] == []


def test_chat_yes_runs_an_approved_call_to_completion_in_one_shot(cli, gateway, scripted_engine, person):
    sid = scripted_engine.script(KEEP, {"text": "Kept."})
    done = cli("chat", "asker", "--yes", "-m", f"Keep that I work on the ledger team. script:{sid}")
    assert done.returncode == 0, done.stderr
    assert "approved (--yes)" in done.stdout and "agent> Kept." in done.stdout and "approve?" not in done.stdout
    assert [e["text"] for e in door(gateway, person, "/v1/entries").json()["entries"]] == ["I work on the ledger team."]


def test_chat_json_with_yes_prints_the_ask_the_answer_and_the_approving_turn(cli, scripted_engine):
    sid = scripted_engine.script(KEEP, {"text": "Kept."})
    done = cli("chat", "asker", "--json", "--yes", "-m", f"Keep that I work on the ledger team. script:{sid}")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    flow = [
        (e["event"], e["data"].get("status") or e["data"].get("approve"))
        for e in events
        if e["event"] in ("step", "approval", "done")
    ]
    assert flow == [
        ("step", "needs_approval"),
        ("done", None),
        ("approval", True),
        ("step", "started"),
        ("step", "ok"),
        ("done", None),
    ]
    assert events[1]["data"]["approval"] and events[1]["data"]["arguments"]["text"] == "I work on the ledger team."


# What a model or a tool may write to get at the person's terminal: CSI (clear, colours), OSC 52 (the clipboard),
# OSC 8 (a hyperlink that hides its target), C1 controls (CSI, DCS and ST as single bytes), BEL, BS, CR, DEL.
HOSTILE = (
    "Plain \x1b[2J\x1b[31mred\x1b[0m, \x1b]52;c;ZWNobyBoaQ==\x07clip, "
    "\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\, "
    "\x9b31mcsi\x9b0m, \x90dcs\x9c, bell\x07, back\x08space\x7f\r\nnext\tline."
)


def controls(text: str) -> list[str]:
    """The C0 and C1 controls (and DEL) in a text, but newline and tab."""
    return [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def test_chat_shows_a_tool_name_with_markup_and_strips_control_characters(cli, scripted_engine):
    sid = scripted_engine.script(
        {"call": {"name": "x[/]", "arguments": {"code": "\x1b]52;c;aGk=\x07[bold]print(1)[/]\x9b2J"}}},
        {"text": HOSTILE, "chunks": 7},
    )
    done = cli("chat", "reviewer", stdin=f"Hello. script:{sid}\n")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert controls(done.stdout + done.stderr) == [], controls(done.stdout + done.stderr)
    shown = done.stdout
    assert "step 1 · x[/]" in shown and "No such tool" in shown  # the name as written, as text
    assert "[bold]print(1)[/]" in shown  # arguments as text, never as markup
    assert "agent> Plain [2J[31mred[0m, ]52;c;ZWNobyBoaQ==clip, ]8;;https://evil.example/\\link]8;;\\, 31mcsi0m" in shown
    assert "dcs, bell, backspace" in shown and "next" in shown and "line." in shown


def test_chat_json_strips_control_characters_too(cli, scripted_engine):
    sid = scripted_engine.script({"text": HOSTILE})
    done = cli("chat", "guide", "--json", "-m", f"Hello. script:{sid}")
    assert done.returncode == 0, done.stderr
    text = "".join(json.loads(line)["data"]["text"] for line in done.stdout.splitlines() if '"delta"' in line)
    assert controls(text) == [] and controls(done.stdout) == []
    assert text.startswith("Plain [2J[31mred[0m, ]52;c;") and text.endswith("backspace\nnext\tline.")


def test_notes_with_markup_are_listed_and_recalled_as_written(cli, gateway, scripted_engine, person):
    text, source = "Write [/] as it is, and [red]this[/red] too.", "[bold]tour[/]"
    assert cli("memory", "add", text, "--kind", "preference", "--source", source).returncode == 0
    listed = cli("memory", "list")
    assert listed.returncode == 0, listed.stderr
    assert text in listed.stdout and source in listed.stdout
    found = cli("memory", "search", "How should I write brackets like [/]?")
    assert found.returncode == 0 and text in found.stdout, found.stderr
    sid = scripted_engine.script({"text": "Noted."})
    said = cli("chat", "reviewer", stdin=f"How should I write [/]? script:{sid}\n")
    assert said.returncode == 0 and "Traceback" not in said.stderr, said.stderr
    assert text in said.stdout


def test_a_forget_card_shows_the_notes_text_beside_its_id(cli, gateway, scripted_engine, person):
    note = requests.post(
        gateway.url + "/v1/entries",
        headers=person.headers,
        timeout=30,
        json={"kind": "fact", "text": "I work on the ledger team.", "source": "test"},
    ).json()
    sid = scripted_engine.script({"call": {"name": "forget", "arguments": {"id": note["id"]}}}, {"text": "Kept it."})
    done = cli("chat", "asker", stdin=f"Forget that I work on the ledger team. script:{sid}\nn\n")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    card = out[out.index("step 1 · forget") : out.index("needs your approval")]  # the card, above its status
    assert note["id"] in card and "note fact: I work on the ledger team." in card
    assert out.index("needs your approval") < out.index("approve? [y/N]")
    assert [e["id"] for e in door(gateway, person, "/v1/entries").json()["entries"]] == [note["id"]]


def formats(text: str) -> list[str]:
    return [f"U+{ord(c):04X}" for c in text if unicodedata.category(c) == "Cf"]


def escape(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def test_chat_shows_format_characters_escaped_in_tool_names_arguments_and_the_prompt(cli, gateway, scripted_engine, person):
    sid = scripted_engine.script(
        {"call": {"name": f"x{HIDDEN}y", "arguments": {"code": f"print(1){HIDDEN}"}}},
        {"call": {"name": "remember", "arguments": {"kind": "fact", "text": f"I work on{HIDDEN}the ledger team."}}},
        {"text": "Kept nothing."},
    )
    done = cli("chat", "asker", stdin=f"Keep that I work on the ledger team. script:{sid}\nn\n")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert formats(done.stdout + done.stderr) == []
    out = " ".join(done.stdout.split())
    unknown = out[out.index("step 1 · x") : out.index("No such tool")]  # the error card of a tool no one has
    asked = out[out.index("step 2 · remember") : out.index("needs your approval")]  # the approval card
    prompt = out[out.index("step 2 · remember:") :]
    cards = {"the tool's name": unknown.split("arguments")[0], "a step's arguments": unknown.split("arguments")[1]}
    cards |= {"the approval card's arguments": asked}
    missing = [
        (card, name) for card, shown in cards.items() for name, c in FORMAT_CHARACTERS.items() if escape(c) not in shown
    ]
    assert missing == []
    hidden = "".join(map(escape, HIDDEN))
    assert f"step 1 · x{hidden}y" in unknown and f"print(1){hidden}" in unknown
    assert f'"text": "I work on{hidden}the ledger team."' in asked and "approve? [y/N]" in prompt
    assert door(gateway, person, "/v1/entries").json()["entries"] == []


def test_a_forget_card_shows_format_characters_in_the_note_escaped(cli, gateway, scripted_engine, person):
    text = f"I work on the ledger team.{HIDDEN} Ask me about it."
    note = requests.post(
        gateway.url + "/v1/entries", headers=person.headers, timeout=30, json={"kind": "fact", "text": text, "source": "t"}
    ).json()
    sid = scripted_engine.script({"call": {"name": "forget", "arguments": {"id": note["id"]}}}, {"text": "Kept it."})
    done = cli("chat", "asker", stdin=f"Forget that I work on the ledger team. script:{sid}\nn\n")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    card = out[out.index("step 1 · forget") : out.index("needs your approval")]
    assert formats(card) == []  # (the table of recalled notes, after the answer, shows a note as written)
    assert [name for name, c in FORMAT_CHARACTERS.items() if escape(c) not in card] == []
    assert f"note fact: {text.replace(HIDDEN, ''.join(map(escape, HIDDEN)))}" in card
    assert [e["id"] for e in door(gateway, person, "/v1/entries").json()["entries"]] == [note["id"]]
