"""The `agentfn` CLI's commands but chat (memory, agents, tools, call, audit) as a person runs them: a subprocess
against the real gateway, memory and model function."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
import requests
from support.model import AGENTFN, Person, agentfn, door, registry_document

from agentfn.operator.audit import records, rows

NOTE = "Prefers four spaces for indentation in Python code."
QUESTION = "How should my Python code be formatted and indented?"
SUMMARY = "The person asked how to indent Python code and settled on four spaces for each level."


def test_memory_add_list_edit_forget(cli, gateway, person):
    added = cli("memory", "add", "Works on the ledger service.", "--kind", "fact", "--source", "onboarding notes")
    assert added.returncode == 0, added.stderr
    (entry,) = door(gateway, person, "/v1/entries").json()["entries"]
    assert (entry["kind"], entry["text"], entry["source"]) == ("fact", "Works on the ledger service.", "onboarding notes")
    assert entry["id"] in added.stdout

    listed = cli("memory", "list")
    assert listed.returncode == 0 and entry["id"][:8] in listed.stdout and "Works on the ledger service." in listed.stdout
    assert "onboarding notes" in listed.stdout
    assert "no entries" in cli("memory", "list", "--kind", "preference").stdout

    edited = cli("memory", "edit", entry["id"][:8], "--text", "Works on the ledger and billing services.")
    assert edited.returncode == 0, edited.stderr
    (changed,) = door(gateway, person, "/v1/entries").json()["entries"]
    assert (changed["id"], changed["text"], changed["source"]) == (
        entry["id"],
        "Works on the ledger and billing services.",
        "onboarding notes",
    )
    assert cli("memory", "edit", entry["id"], "--source", "the team wiki").returncode == 0
    assert door(gateway, person, "/v1/entries").json()["entries"][0]["source"] == "the team wiki"

    forgot = cli("memory", "forget", entry["id"][:6])
    assert forgot.returncode == 0 and entry["id"] in forgot.stdout
    assert door(gateway, person, "/v1/entries").json()["entries"] == []
    assert "no entries" in cli("memory", "list").stdout


def test_memory_search_shows_what_recall_finds_with_its_similarity(cli, gateway, person):
    assert cli("memory", "add", NOTE, "--kind", "preference").returncode == 0
    assert cli("memory", "add", "Works on the ledger service.").returncode == 0
    found = cli("memory", "search", QUESTION)
    assert found.returncode == 0, found.stderr
    assert "four spaces" in found.stdout and "ledger" not in found.stdout
    assert "similarity >=" in found.stdout
    assert "recall finds nothing" in cli("memory", "search", QUESTION, "--kind", "fact").stdout
    refused = cli("memory", "search", "x", "--kind", "diary")
    assert refused.returncode != 0 and "kinds" in refused.stderr


FORGET_ALL_CASES = [
    # (arguments, what the person types, exit code, entries left, printed, said on stderr)
    (
        ("--all",),
        "forget everything\n",
        0,
        0,
        "forgot 3 entries: 2 facts, 1 preference, 0 episodes",
        "You have 2 facts, 1 preference, 0 episodes",
    ),
    (("--all",), "  forget everything  \n", 0, 0, "forgot 3 entries", "Type forget everything to go on"),
    (("--all", "--yes"), None, 0, 0, "forgot 3 entries: 2 facts, 1 preference, 0 episodes", ""),
    (("--all",), "forget all\n", 1, 3, "", "nothing was forgotten\nthe confirmation is the phrase `forget everything`"),
    (("--all",), "Forget Everything\n", 1, 3, "", "nothing was forgotten"),
    (("--all",), "", 1, 3, "", "nothing was forgotten"),  # no answer (end of input)
    ((), None, 2, 3, "", "name one entry, or --all"),
    (("--all", "0000"), None, 2, 3, "", "name one entry, or --all"),
]


@pytest.mark.parametrize(
    ("args", "typed", "code", "left", "printed", "said"),
    FORGET_ALL_CASES,
    ids=["typed", "typed_with_spaces", "yes", "other_words", "other_case", "no_answer", "neither", "both"],
)
def test_memory_forget_all_takes_the_typed_phrase_or_yes(cli, gateway, person, args, typed, code, left, printed, said):
    for text, kind in (
        ("Works on the ledger service.", "fact"),
        ("Is on call on Tuesdays.", "fact"),
        ("Prefers short answers.", "preference"),
    ):
        assert cli("memory", "add", text, "--kind", kind).returncode == 0
    done = cli("memory", "forget", *args, stdin=typed)
    assert done.returncode == code, done
    assert printed in done.stdout and said in done.stderr, done
    assert len(door(gateway, person, "/v1/entries").json()["entries"]) == left
    assert "Traceback" not in done.stderr + done.stdout
    if code == 0:
        assert "Works on the ledger" not in done.stdout + done.stderr  # the receipt has counts, not text
        assert "what stays" in done.stdout and "model.token_budgets" in done.stdout  # and says what it leaves


def test_memory_forget_all_shows_the_platforms_problem(gateway):
    done = agentfn("memory", "forget", "--all", "--yes", url=gateway.url, token="not-a-token")
    assert done.returncode == 1 and done.stderr.splitlines()[0] == "Unauthorized" and "Traceback" not in done.stderr


def test_memory_add_of_a_note_already_kept_says_so_and_keeps_one(cli, gateway, person):
    first = cli("memory", "add", "Prefers tabs over spaces.")
    again = cli("memory", "add", "prefers tabs  over spaces")
    assert first.returncode == again.returncode == 0, again.stderr
    (entry,) = door(gateway, person, "/v1/entries").json()["entries"]
    assert "already kept" not in first.stdout and "kept" in first.stdout
    assert "already kept" in again.stdout and entry["id"] in again.stdout


def test_an_id_prefix_must_name_one_entry(cli, gateway, person):
    for text in ("First note.", "Second note.", "Third note."):
        assert cli("memory", "add", text).returncode == 0
    ids = [e["id"] for e in door(gateway, person, "/v1/entries").json()["entries"]]
    unknown = next(p for p in ("0000", "ffff", "abcd", "1234") if not any(i.startswith(p) for i in ids))
    missing = cli("memory", "forget", unknown)
    assert missing.returncode == 1 and "no such entry" in missing.stderr
    too_short = cli("memory", "forget", ids[0][:2])
    assert too_short.returncode == 1 and "too short" in too_short.stderr
    assert len(door(gateway, person, "/v1/entries").json()["entries"]) == 3


@pytest.mark.parametrize(
    ("args", "title", "detail"),
    [
        (("memory", "forget", str(uuid.uuid4())), "Not Found", "no entry with this id"),
        (("memory", "edit", str(uuid.uuid4()), "--text", "x"), "Not Found", "no entry with this id"),
        (("memory", "add", "Likes tea.", "--kind", "opinion"), "Unprocessable Content", "kind"),
        (("memory", "list", "--kind", "opinion"), "Bad Request", "kind: must be one of"),
        (("call", "no_such_tool"), "Not Found", "no such tool"),
        (("chat", "secret", "-m", "hello"), "Not Found", "no such agent"),
    ],
    ids=["forget_unknown", "edit_unknown", "add_invalid_kind", "list_invalid_kind", "unknown_tool", "ungranted_agent"],
)
def test_a_problem_is_shown_as_its_title_and_detail(cli, args, title, detail):
    done = cli(*args)
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert lines[0] == title and detail in "\n".join(lines[1:]), done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_without_a_token_the_cli_says_how_to_get_one(gateway):
    for args in (("memory", "list"), ("chat", "reviewer", "-m", "hi"), ("agents",), ("tools",)):
        done = agentfn(*args, url=gateway.url)
        assert done.returncode == 2
        assert "export AGENTFN_TOKEN=$(agentfn token alice --groups developers)" in done.stderr
        assert "Traceback" not in done.stderr


def test_an_expired_or_foreign_token_is_the_platforms_401(gateway):
    done = agentfn("memory", "list", url=gateway.url, token="not-a-token")
    assert done.returncode == 1 and done.stderr.splitlines()[0] == "Unauthorized"


@pytest.mark.slow  # the CLI as a process
def test_an_unreachable_gateway_is_one_clear_line():
    from agentfn.devstack.harness.ports import free_port

    url = f"http://127.0.0.1:{free_port()}"
    for args in (("memory", "list"), ("chat", "reviewer"), ("agents",)):
        done = agentfn(*args, url=url, token="x", stdin="hello\n")
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"the gateway is not answering at {url}: start the platform with "
            "`agentfn up`, or give another with --url or AGENTFN_URL"
        ]


def first_cells(table: str) -> set[str]:
    """The first column of a table the CLI printed (its continuation lines start blank)."""
    return {line.split()[0] for line in table.splitlines() if line.strip() and not line.startswith(" " * 2)}


def block(shown: str, name: str) -> str:
    """One agent's block of `agentfn agents`: its first line (the name) and the indented lines under it."""
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == name)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])


def test_agents_shows_what_the_caller_may_use(cli, gateway, person, issuer):
    done = cli("agents")
    assert done.returncode == 0, done.stderr
    granted = door(gateway, person, "/v1/agents").json()["agents"]
    assert {a["name"] for a in granted} <= first_cells(done.stdout) and "secret" not in first_cells(done.stdout)
    for tool in {t for a in granted for t in a["tools"]}:
        assert tool in done.stdout
    reviewer = block(done.stdout, "reviewer")
    assert "fast" in reviewer and "preferences" in reviewer and "Reviews code with the person." in reviewer
    assert "4 steps" in reviewer and "60000 tokens" in reviewer and "30 s" in reviewer
    assert "platform_status" in reviewer and "run_code" in reviewer and "Answers fast." not in reviewer
    stranger = agentfn("agents", url=gateway.url, token=Person(issuer, groups=()).token)
    assert stranger.returncode == 0 and "platform_status" in stranger.stdout and "run_code" not in stranger.stdout


def test_tools_and_call_run_as_the_caller(cli, gateway, person, issuer):
    listed = cli("tools")
    assert listed.returncode == 0
    names = {t["name"] for t in door(gateway, person, "/v1/tools").json()["tools"]}
    assert "platform_status" in names and names <= first_cells(listed.stdout)

    called = cli("call", "platform_status", "--arg", "service=llm")
    assert called.returncode == 0, called.stderr

    def timeless(content):
        return {k: v for k, v in content.items() if k != "taken_at"}

    content = timeless(json.loads(called.stdout))
    assert content == timeless(
        requests.post(
            gateway.url + "/v1/tools/platform_status/call",
            headers=person.headers,
            json={"arguments": {"service": "llm"}},
            timeout=30,
        ).json()["content"]
    )
    assert timeless(json.loads(cli("call", "platform_status", "--json", '{"service": "llm"}').stdout)) == content
    assert timeless(json.loads(cli("call", "platform_status", "--arg", 'service="llm"').stdout)) == content
    number = cli("call", "platform_status", "--arg", "service=42")  # 42 parses: a number, which the tool refuses
    assert number.returncode == 1 and number.stderr.splitlines()[0] == "Unprocessable Content", number.stderr

    stranger = agentfn("call", "platform_status", url=gateway.url, token=Person(issuer, groups=()).token)
    assert stranger.returncode == 1 and "Traceback" not in stranger.stderr
    assert stranger.stderr.splitlines()[0] == "Forbidden", stranger.stderr


def test_call_refuses_an_argument_that_is_not_key_value(cli):
    for args in (("--arg", "service"), ("--json", "{not json"), ("--json", "[1]")):
        done = cli("call", "platform_status", *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.strip(), done


@pytest.mark.slow  # the CLI as a process
def test_audit_renders_the_grants_of_a_registry(registry_file):
    expected = records(rows(registry_document()))
    from_file = agentfn("audit", str(registry_file), "--json")
    assert from_file.returncode == 0 and json.loads(from_file.stdout) == expected
    from_stdin = agentfn("audit", "-", "--json", stdin=registry_file.read_text())
    assert json.loads(from_stdin.stdout) == expected
    table = agentfn("audit", "-", stdin=registry_file.read_text()).stdout.splitlines()
    assert [c for c in table[0].split() if c.isalpha()] == [
        "agent",
        "tool",
        "subjects",
        "groups",
        "channel",
        "daily",
        "approval",
        "grant",
    ]
    assert len([line for line in table if "agentfn/" in line]) == len(expected)
    cells = [[c for c in line.split() if c != "│"] for line in table]
    assert ["secret", "platform_status", "nobody-else", "-", "step", "-", "required", "agentfn/test"] in cells
    assert ["reviewer", "remember", "-", "developers", "step", "-", "waived", "agentfn/test"] in cells
    broken = agentfn("audit", "-", stdin="{not json")
    assert broken.returncode == 1 and broken.stderr.splitlines()[0] == "the registry in standard input is not JSON"


@pytest.mark.slow  # the CLI as a process
def test_audit_from_the_cluster_says_when_kubectl_cannot_read_it(tmp_path):
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "COLUMNS": "200"}
    done = subprocess.run(
        [str(AGENTFN), "audit", "--kube", "--namespace", "elsewhere"], capture_output=True, text=True, env=env, timeout=90
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[0] == "kubectl could not read the ConfigMap elsewhere/agentfn-registry", done.stderr


def test_agents_is_readable_at_80_columns(gateway, issuer):
    """Every name, tool and word of a brief whole on one line (none split across two), no line wider than 80."""
    admin = Person(issuer, groups=("developers", "platform-users", "platform-admins"))
    done = agentfn("agents", url=gateway.url, token=admin.token, columns=80)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, done.stdout
    words = {w.strip(",.;:()·") for line in lines for w in line.split()}
    for a in door(gateway, admin, "/v1/agents").json()["agents"]:
        for word in (a["name"], *a["tools"], *a["brief"].split(), str(a["limits"]["tokensPerTurn"])):
            assert word.strip(",.;:()") in words, (word, done.stdout)
