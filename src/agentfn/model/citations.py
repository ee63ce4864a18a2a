"""Which recalled notes an answer cites (M4): the ones it used, never one it was not shown, never one it did not use.

What the engine says it used comes first: a constrained reply's `cited` (its grammar allows only the ids shown in the
turn), or the ids a native engine writes in square brackets. Then the answer is checked against the notes:
- an answer that says nothing about the person is noted ("I don't have that noted") cites nothing;
- a fact (or an episode) is cited only when the answer carries something of it the question did not already say (a
  word of it); and when the engine forgot to say it used it, when what the answer carries is a name or a number of
  it ("Rust" of "Moj omiljeni programski jezik je Rust.");
- a preference shapes an answer rather than being repeated in it: cited when the answer shows it (`shows`): it begins
  with the name the preference asks to be called, or is in the language it names (the platform holds answers to
  both); or, when the engine says it followed it, is short when it asks for short answers, or carries a word of it.
"""

from __future__ import annotations

import re
from typing import Any

from .grounding import fold, kin
from .language import UNNOTED, answer_language, form_of_address, likely_language

WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Words that say nothing of what a note holds, in English and Croatian (folded, as `words` folds).
COMMON = set(
    """the and for you your yours are was were has have had that this with what which who whom where when how does
    did not but from they them their there then than its into about also just like only very more most some any
    all can could would should will shall may might must been being use used uses using want wants note notes
    person answer answers always never please
    ali ako ili koji koja koje sto sta kako gdje kada kad tko moj moja moje moji tvoj tvoja tvoje vas vasa nas
    nasa ima imam imas jesam nisam nije biti bio bila bilo sam smo ste su jer jos samo uvijek nikad molim zove
    zovem zoves zovu called named name ime""".split()
)


def cited(
    answer: str, recalled: list[dict[str, Any]], declared: list[str] | None, messages: list[dict[str, Any]]
) -> list[str]:
    """The ids of the recalled notes the answer used, in the order they were shown."""
    if not recalled or unnoted(answer):
        return []
    said = declared if declared is not None else bracketed(answer, [e["id"] for e in recalled])
    asked = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    question = words(asked)
    used = {w for w in words(answer) if not shares({w}, question)}
    out = []
    for entry in recalled:
        text = entry.get("text", "")
        if entry.get("kind") == "preference":
            carried = shows(answer, entry, entry["id"] in said, used, asked)
        elif entry["id"] in said:
            carried = shares(words(text) - question, used)
        else:
            carried = shares(words(text, names_only=True) - question, used)
        if carried:
            out.append(entry["id"])
    return out


SHORT = re.compile(r"\b(?:short|brief|concise|sentence|words|kratk|sažet|sazet|rečenic|recenic|riječ|rijec)", re.I)
SHORT_WORDS = 30  # what a short answer has at most


def shows(answer: str, preference: dict[str, Any], said: bool, used: set[str], question: str) -> bool:
    """The answer shows it followed the preference (`said`: the engine says it did). What the platform itself holds
    the answer to needs no word of the engine's: the name a preference asks to be called, and the language it names
    when the question is in another."""
    address = form_of_address([preference])
    if address:
        return answer.lstrip().lower().startswith(address.lower())
    named = answer_language([], [preference])
    if named:
        return likely_language(answer) == named and (said or likely_language(question) != named)
    if not said:
        return False
    if SHORT.search(str(preference.get("text", ""))):
        return len(answer.split()) <= SHORT_WORDS
    return shares(words(preference.get("text", "")), used)


def bracketed(answer: str, ids: list[str]) -> list[str]:
    """The recalled ids an answer names (a native engine cites by writing `[id]`); never an id not recalled."""
    lowered = answer.lower()
    return [i for i in ids if i.lower() in lowered]


def unnoted(answer: str) -> bool:
    """The answer says only that the person's question is not noted (after what it calls the person, if anything)."""
    said = words(answer)
    return any(words(phrase) <= said and len(said) <= len(words(phrase)) + 2 for phrase in UNNOTED.values())


def words(text: Any, names_only: bool = False) -> set[str]:
    """The text's content words, folded (lowercased, without accents), numbers too; `names_only`: only its numbers and
    the words it capitalises after its first (a name: "Rust", "Zagreb", "GitHub")."""
    found = WORD.findall(str(text))
    if names_only:
        found = [w for i, w in enumerate(found) if w.isdigit() or (i > 0 and not w.islower())]
    return {w for w in map(fold, found) if (len(w) >= 3 or w.isdigit()) and w not in COMMON}


def shares(these: set[str], those: set[str]) -> bool:
    """Some word of `these` is a form of some word of `those` (grounding.kin)."""
    return any(kin(a, b) for a in these for b in those)
