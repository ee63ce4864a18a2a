"""Which questions are about the person (their answer must stand on what the turn showed), and when an answer does:
one table each, as the guard reads them."""

from __future__ import annotations

import pytest

from agentfn.model.grounding import about_the_person, stands

QUESTIONS = {
    # the person's own facts
    "What is my cat called?": True,
    "Which editor do I use?": True,
    "Where do I work?": True,
    "When is my birthday?": True,
    "What time is our standup?": True,
    "What do we run CI on?": True,
    "How many kids do I have?": True,
    "Kako se zove moja mačka?": True,
    "Koji je moj broj telefona?": True,
    "Gdje radim?": True,
    "Koji editor koristim?": True,
    "Kad mi je rođendan?": True,
    "Koji jezik uglavnom pišem?": True,
    "U koliko sati imamo sastanak?": True,
    "Kako se zove voditeljica mog tima?": True,
    # anyone may answer: knowledge, advice, how-to, code, the agent's view
    "What is a closure?": False,
    "How do I reverse a list in Python?": False,
    "Which editor should I use?": False,
    "What do you think of my approach?": False,
    "What does my code print? print(6 * 7)": False,
    "Review my function: def f(x): return x": False,
    "Što je rekurzija?": False,
    "Što je program?": False,
    "Koji je problem s ovim sustavom?": False,
    "Koji editor trebam koristiti?": False,
    "Kako da sortiram listu?": False,
    "Run this Python code in the sandbox: print(6 * 7)": False,
    "Remember that I use Vim.": False,
}


@pytest.mark.parametrize(("question", "personal"), QUESTIONS.items(), ids=list(QUESTIONS))
def test_a_question_is_about_the_person_when_it_asks_for_their_own_facts(question, personal):
    assert about_the_person(question) is personal


CAT = {"id": "n-cat", "kind": "fact", "text": "Moja mačka se zove Mica."}
SHORT = {"id": "n-short", "kind": "preference", "text": "Answer me in one short sentence."}
GITLAB = {"id": "n-ci", "kind": "fact", "text": "The project's CI runs on GitLab CI."}
RAN = [{"role": "user", "content": "Run print(6 * 7)"}, {"role": "assistant", "content": "The program printed 42."}]
ANSWERS = {
    # answer, question, notes shown, cited, earlier messages -> stands
    "a_cited_fact_and_its_name": ("Your cat is called Mica.", "What is my cat called?", [CAT], ["n-cat"], [], True),
    "a_name_in_another_case": ("Tvoja mačka se zove Mici.", "Kako se zove moja mačka?", [CAT], ["n-cat"], [], True),
    "a_cited_fact_and_another_name": (
        "Your cat Mica lives in Split.",
        "Where does my cat live?",
        [CAT],
        ["n-cat"],
        [],
        False,
    ),
    "nothing_cited": ("Your cat is called Whiskers.", "What is my cat called?", [CAT], [], [], False),
    "only_a_preference_cited": ("It is on 7 December.", "When is my birthday?", [SHORT], ["n-short"], [], False),
    "no_note_at_all": ("I work for a shipyard.", "Where do I work?", [], [], [], False),
    "a_short_name": ("Your project uses GitLab CI.", "Which CI does my project use?", [GITLAB], [GITLAB["id"]], [], True),
    "from_the_conversation": ("It printed 42.", "What did my program print?", [], [], RAN, True),
    "a_number_the_conversation_never_said": ("It printed 43.", "What did my program print?", [], [], RAN, False),
}


@pytest.mark.parametrize(("answer", "question", "shown", "cited", "history", "ok"), ANSWERS.values(), ids=ANSWERS.keys())
def test_an_answer_about_the_person_stands_only_on_what_the_turn_showed(answer, question, shown, cited, history, ok):
    assert stands(answer, question, shown, cited, history) is ok
