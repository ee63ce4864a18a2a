"""Ending a session (E1, E2): the summary's rules, one retry, the person's budget, WriteEpisode as itself."""

from __future__ import annotations

import psycopg
import pytest
import requests

from agentfn.model.episodes import MESSAGE_CHARS, SUMMARY_TOKENS, faults, language

GOOD = "The person asked how to rotate the ledger database password and decided to do it every ninety days."
GOOD_HR = "Osoba je pitala kako promijeniti lozinku baze podataka i odlučila to raditi svakih devedeset dana."
CHAT_EN = [
    {"role": "user", "content": "How do I rotate the ledger's database password?"},
    {"role": "assistant", "content": "Rotate it in the vault, then restart the service."},
    {"role": "user", "content": "Fine, I will do it every ninety days."},
]
CHAT_HR = [
    {"role": "user", "content": "Kako da promijenim lozinku baze podataka za knjigu?"},
    {"role": "assistant", "content": "Promijenite je u trezoru i ponovno pokrenite servis."},
    {"role": "user", "content": "Dobro, radit ću to svakih devedeset dana."},
]

RULES = [
    ("fine", GOOD, "en", []),
    ("fine_croatian", GOOD_HR, "hr", []),
    ("too_many_words", "The person " + " ".join(["sat"] * 80) + ".", "en", ["more than 80 words"]),
    (
        "too_many_characters",
        "The person discussed " + "extraordinarily " * 30 + "things.",
        "en",
        ["more than 500 characters"],
    ),
    ("code_backticks", "The person ran `make test` to check the change.", "en", ["code"]),
    ("code_call", "The person called rotate(password, days=90) on the ledger.", "en", ["code"]),
    ("command", "The person decided to run sudo systemctl restart ledger after rotating.", "en", ["command"]),
    ("command_flags", "The person rotates the password with the --force option.", "en", ["command"]),
    ("url", "The person read https://vault.example/rotate before deciding.", "en", ["address"]),
    ("domain", "The person found the guide on vault.example.com and will follow it.", "en", ["address"]),
    ("ip_address", "The person connects to the database at 10.20.30.40 every morning.", "en", ["address"]),
    ("e_mail", "The person will send the new password to ops@example.org afterwards.", "en", ["address", "e-mail"]),
    ("api_key", "The person shared the key sk-live4f9a8b7c6d5e4f3a2b1c for the ledger.", "en", ["credential"]),
    ("password_value", "The person set the password: hunter2 for the ledger.", "en", ["credential"]),
    ("long_token", "The person pasted token ghx8A7f6E5d4C3b2A1z0Y9x8W7v6U5t4 into the chat.", "en", ["credential"]),
    (
        "first_person",
        "I asked how to rotate the ledger password and decided on ninety days.",
        "en",
        ["first or second person"],
    ),
    (
        "second_person",
        "You asked how to rotate the ledger password and decided on ninety days.",
        "en",
        ["first or second person"],
    ),
    (
        "croatian_second_person",  # the auxiliary: "you approved both"
        "Osoba je pitala kako mijenjati lozinku, a odobrili ste oboje.",
        "hr",
        ["first or second person"],
    ),
    ("croatian_first_person", "Osoba je pitala za lozinku, pa sam zapamtio rok.", "hr", ["first or second person"]),
    ("croatian_first_person_verb", "Osoba je rekla da radim u timu za plaćanja.", "hr", ["first or second person"]),
    ("wrong_language", GOOD, "hr", ["not in the person's language"]),
    ("empty", "   ", "en", ["empty"]),
]


@pytest.mark.parametrize(("text", "person_language", "broken"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_the_episode_rules(text, person_language, broken):
    assert faults(text, person_language) == broken


def test_the_persons_language_is_told_apart():
    assert language(" ".join(m["content"] for m in CHAT_HR if m["role"] == "user")) == "hr"
    assert language(" ".join(m["content"] for m in CHAT_EN if m["role"] == "user")) == "en"


def test_ids_and_numbers_are_no_persons_language():
    assert language("hello 7f3ab21c9d0e") is None
    assert language("0x1f 12345 9f3a-77b2") is None


def end(model, who, agent, messages, **extra):
    return requests.post(
        f"{model.url}/v1/agents/{agent}/sessions/end", json={"messages": messages, **extra}, headers=who.headers, timeout=30
    )


def with_script(messages, sid):
    return [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + f" script:{sid}"}]


def episodes_of(memory, who):
    return requests.get(memory.url + "/v1/entries", params={"kind": "episode"}, headers=who.headers).json()["entries"]


def rows(model_env, subject):
    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        return conn.execute(
            "SELECT kind, status, problem, tokens_in, tokens_out, rounds FROM generations WHERE subject = %s", (subject,)
        ).fetchall()


@pytest.mark.parametrize(("chat", "summary"), [(CHAT_EN, GOOD), (CHAT_HR, GOOD_HR)], ids=["english", "croatian"])
def test_a_session_ends_as_an_episode_the_person_recalls(model, scripted_engine, memory, person, model_env, chat, summary):
    sid = scripted_engine.script({"text": summary})
    response = end(model, person, "reviewer", with_script(chat, sid), session_id="s-1")
    assert response.status_code == 201, response.text
    episode = response.json()["episode"]
    assert episode["kind"] == "episode" and episode["text"] == summary and episode["session_id"] == "s-1"
    assert [e["id"] for e in episodes_of(memory, person)] == [episode["id"]]
    sent = scripted_engine.requests(sid)
    assert len(sent) == 1 and "tools" not in sent[0] and "response_format" not in sent[0]
    assert ("Croatian" if chat is CHAT_HR else "English") in sent[0]["messages"][0]["content"]
    ((kind, status, problem, tokens_in, tokens_out, rounds),) = rows(model_env, person.subject)
    assert (kind, status, problem, rounds) == ("session_end", "ok", None, 1) and tokens_in > 0 and tokens_out > 0


def test_a_person_who_writes_mostly_ids_gets_the_first_summary_kept(model, scripted_engine, memory, person):
    # The identifier reads "hello <id>" as no language at all: that must not refuse a summary written in words.
    sid = scripted_engine.script({"text": GOOD})
    response = end(model, person, "reviewer", [{"role": "user", "content": f"hello 7f3ab21c9d0e script:{sid}"}])
    assert response.status_code == 201, response.text
    assert response.json()["episode"]["text"] == GOOD and len(scripted_engine.requests(sid)) == 1


TOUR = [
    {"role": "user", "content": "Run this Python code in the sandbox: print(6 * 7)"},
    {"role": "assistant", "content": "It printed 42."},
    {"role": "user", "content": "Open the page https://example.com/docs and `grep` it; mail ops@example.org"},
    {"role": "assistant", "content": "The page at www.example.com is about examples; see 10.0.0.1 and /etc/x/."},
    {"role": "user", "content": "Thanks."},
]


def test_the_summariser_reads_code_and_addresses_in_plain_words(model, scripted_engine, memory, person):
    # A small model copies what it reads into its summary: what the rules refuse never reaches it.
    sid = scripted_engine.script({"text": "The person ran some code in the sandbox and read a web page about examples."})
    response = end(model, person, "reviewer", with_script(TOUR, sid))
    assert response.status_code == 201, response.text
    read = scripted_engine.requests(sid)[0]["messages"][1]["content"]
    assert "Person: Run this Python code in the sandbox: some code" in read and "It printed 42." in read
    assert "Open the page a web address and some code it; mail an e-mail address" in read
    for kept_out in ("print(", "example.com", "example.org", "@", "`", "10.0.0.1", "/etc/", "www."):
        assert kept_out not in read, kept_out


def test_the_summariser_reads_the_head_of_a_long_message(model, scripted_engine, memory, person):
    listing = "The report lists " + " ".join(f"item{n}" for n in range(400)) + "."
    chat = [*CHAT_EN[:1], {"role": "assistant", "content": listing}, *CHAT_EN[2:]]
    sid = scripted_engine.script({"text": GOOD})
    assert end(model, person, "reviewer", with_script(chat, sid)).status_code == 201
    read = scripted_engine.requests(sid)[0]["messages"][1]["content"]
    shown = next(line for line in read.splitlines() if line.startswith("Assistant: The report lists"))
    assert len(shown) <= len("Assistant: ") + MESSAGE_CHARS + 4 and shown.endswith(" ...") and "item399" not in read
    assert "every ninety days" in read  # the messages after it are read whole


def test_a_summary_that_breaks_a_rule_is_written_again_once(model, scripted_engine, memory, person):
    sid = scripted_engine.script({"text": "The person read https://vault.example/rotate first."}, {"text": GOOD})
    response = end(model, person, "reviewer", with_script(CHAT_EN, sid))
    assert response.status_code == 201 and response.json()["episode"]["text"] == GOOD
    second = scripted_engine.requests(sid)[1]["messages"][0]["content"]
    assert "refused (address)" in second


def test_a_first_sentence_the_bound_cut_with_no_whole_clause_is_written_again(model, scripted_engine, memory, person):
    sid = scripted_engine.script(
        {"text": "The person asked how often to rotate the ledger password and the"}, {"text": GOOD}
    )
    response = end(model, person, "reviewer", with_script(CHAT_EN, sid))
    assert response.status_code == 201 and response.json()["episode"]["text"] == GOOD
    assert (
        "refused (its first sentence cut short by the bound)" in scripted_engine.requests(sid)[1]["messages"][0]["content"]
    )


KEPT_PARTS = [  # (case, what the engine wrote, what is kept): the longest run of first sentences keeping every rule
    ("a_late_address", f"{GOOD} Then the person read https://vault.example/rotate.", GOOD),
    ("a_late_first_person", f"{GOOD} I think that is wise.", GOOD),
    (
        "past_the_character_bound",  # each further sentence 71 characters: GOOD (103) and five fit in 500
        f"{GOOD} " + " ".join(f"The assistant then explained step {n} of the rotation in some detail." for n in range(9)),
        f"{GOOD} " + " ".join(f"The assistant then explained step {n} of the rotation in some detail." for n in range(5)),
    ),
    ("cut_by_the_token_bound", f"{GOOD} The assistant then suggested that the person", GOOD),
    ("a_late_line_of_the_conversation", f"{GOOD} Rotate it in the vault, then restart the service.", GOOD),
    (
        "its_first_sentence_cut_by_the_token_bound",  # its whole clauses, closed as a sentence
        "The person asked how often to rotate the ledger password, and the assistant suggested that the",
        "The person asked how often to rotate the ledger password.",
    ),
]


@pytest.mark.parametrize(("case", "written", "kept"), KEPT_PARTS, ids=[c[0] for c in KEPT_PARTS])
def test_a_summary_that_strays_late_keeps_its_first_sentences_that_keep_the_rules(
    model, scripted_engine, memory, person, case, written, kept
):
    sid = scripted_engine.script({"text": written})
    response = end(model, person, "reviewer", with_script(CHAT_EN, sid))
    assert response.status_code == 201, response.text
    assert response.json()["episode"]["text"] == kept and not faults(kept, "en")
    assert [e["text"] for e in episodes_of(memory, person)] == [kept]
    assert len(scripted_engine.requests(sid)) == 1  # kept at once: no second summary written
    assert scripted_engine.requests(sid)[0]["max_tokens"] <= SUMMARY_TOKENS


@pytest.mark.parametrize(
    ("summary", "rule"),
    [
        (" ".join(["The person talked"] * 30) + ".", "more than 80 words"),
        ("The person ran `make rotate` on the ledger.", "code"),
        ("The person read https://vault.example/rotate first.", "address"),
        ("The person mailed ops@example.org about it.", "e-mail"),
        ("The person shared the key sk-live4f9a8b7c6d5e4f3a2b1c with the team.", "credential"),
        (GOOD, "not in the person's language"),
        # The conversation echoed rather than told: the assistant's answer, as if it were a fact of the person's.
        ("Rotate it in the vault, then restart the service.", "a line of the conversation"),
    ],
    ids=["too_long", "code", "url", "e_mail", "key", "wrong_language", "a_line_of_the_conversation"],
)
def test_a_summary_that_breaks_the_rules_twice_is_refused_and_nothing_is_kept(
    model, scripted_engine, memory, person, model_env, summary, rule
):
    chat = CHAT_HR if rule == "not in the person's language" else CHAT_EN
    sid = scripted_engine.script({"text": summary}, {"text": summary})
    response = end(model, person, "reviewer", with_script(chat, sid))
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"].endswith("/episode-rules") and rule in problem["rules"]
    assert episodes_of(memory, person) == []
    assert len(scripted_engine.requests(sid)) == 2
    ((kind, status, code, tokens_in, _, rounds),) = rows(model_env, person.subject)
    assert (kind, status, code, rounds) == ("session_end", "error", 422, 2) and tokens_in > 0  # still the person's spend


def test_the_site_guide_keeps_nothing(model, scripted_engine, person, memory):
    sid = scripted_engine.script({"text": GOOD})
    response = end(model, person, "guide", with_script(CHAT_EN, sid))
    assert response.status_code == 422 and response.json()["type"].endswith("/keeps-nothing")
    assert scripted_engine.requests(sid) == [] and episodes_of(memory, person) == []


def test_write_episode_is_reached_only_with_the_service_identity(model, scripted_engine, memory, person, service_token_file):
    # A caller cannot write an episode at memory's door, even with its own subject.
    direct = requests.post(
        memory.url + "/internal/v1/episodes", json={"subject": person.subject, "text": GOOD}, headers=person.headers
    )
    assert direct.status_code in (401, 403)
    # With a caller's token in the model function's identity file, memory refuses the model function too.
    original = service_token_file.read_text()
    try:
        service_token_file.write_text(person.token)
        sid = scripted_engine.script({"text": GOOD})
        refused = end(model, person, "reviewer", with_script(CHAT_EN, sid))
        assert refused.status_code == 502 and "service identity" in refused.json()["detail"]
    finally:
        service_token_file.write_text(original)
    assert episodes_of(memory, person) == []
    sid = scripted_engine.script({"text": GOOD})
    assert end(model, person, "reviewer", with_script(CHAT_EN, sid)).status_code == 201  # read again on each use


def test_an_ungranted_agent_and_a_bad_body(model, person):
    assert end(model, person, "secret", CHAT_EN).status_code == 404
    assert end(model, person, "reviewer", CHAT_EN, tools=[]).status_code == 422
    assert end(model, person, "reviewer", CHAT_EN, session_id="no spaces allowed").status_code == 422
