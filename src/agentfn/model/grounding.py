"""No invented facts about the person: an answer to a question about the person stands only on what the turn showed.

A small model asked "When is my birthday?" with no note of it writes a likely date rather than saying it does not
know; however it is told, it does now and then. So the platform keeps the promise itself: the answer to a question
about the person (`about_the_person`) is held back while it is written, and reaches the person only when it stands
on what the turn showed (`stands`): it cites a fact the person kept (or an earlier message of the conversation could
hold it), and each name and number it states is found in the notes shown, the conversation or the question. Any
other answer to such a question is "I don't have that noted", in the person's language. Every other answer streams
as it is written.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# A question that asks for a fact of the person's own: a question word, then the person (a pronoun, or in Croatian one
# of the verbs people say of themselves, in the first person), and neither code nor "you" (the agent's view is asked).
# Advice ("Which editor should I use?", "Koji editor trebam koristiti?") and how-to questions ("How do I sort a list?")
# are not about the person: anyone may answer them.
ADVICE_EN = r"should|could|would|can|might|shall|you|your"
ADVICE_HR = r"trebam|trebao|trebala|trebamo|treba|bih|bismo|mogu|možeš|mozes|ti|tebi|vi|vam|misliš|mislis|preporuč\w*"
VERBS_HR = (
    r"radi|koristi|živi|zivi|piše|pise|voli|ima|zove|nosi|vozi|pije|jede|sluša|slusa|gleda|igra|uči|uci|studira|"
    r"programira|preferira|drži|drzi|putuje|sjedi|počinje|pocinje|završava|zavrsava|objavljuje|deploya|svira|trenira"
)
ASKS = {
    "en": re.compile(
        rf"\b(?:what|which|where|when|who|whom|whose|how (?:many|much|old|long|often))\b(?![^?]*\b(?:{ADVICE_EN})\b)"
        r"[^?]*\b(?:my|mine|i|me|we|our|us)\b",
        re.I,
    ),
    "hr": re.compile(
        r"\b(?:što|sto|šta|sta|koji|koja|koje|kojeg|kojem|kojim|gdje|kada|kad|tko|koga|čiji|čija|čije|koliko|kako se "
        rf"zove|kako se zovu)\b(?![^?]*\b(?:{ADVICE_HR})\b)[^?]*\b(?:moj\w*|mog|moga|mome|mom|mi|me|meni|naš\w*|nam|nas|"
        rf"(?:{VERBS_HR})mo?)\b",
        re.I,
    ),
}
CODE = re.compile(r"[`{}=;]|\b\w+\([^)]*\)|^\s*(?:def|class|import|function)\b", re.M)
# What an answer states that could be invented: a number, or a word written with a capital inside a sentence (a name).
SENTENCE_START = re.compile(r"(?:^|[.!?:]\s+|\n)")
TOKEN = re.compile(r"\d+|[^\W\d_]+", re.UNICODE)


def about_the_person(message: Any) -> bool:
    """The message asks for a fact of the person's own (not advice, not a how-to, not about code)."""
    if not isinstance(message, str) or CODE.search(message):
        return False
    return any(pattern.search(message) for pattern in ASKS.values())


def stands(answer: str, question: str, shown: list[dict[str, Any]], cited: list[str], history: list[dict[str, Any]]) -> bool:
    """The answer to a question about the person stands on what the turn showed: a fact or an episode it cites (or an
    earlier message of the conversation), and not a name or a number that none of them and not the question holds."""
    facts = {e["id"] for e in shown if e.get("kind") != "preference"}
    if not (facts & set(cited)) and not history:
        return False
    seen = " ".join([question, *(str(e.get("text", "")) for e in shown), *(str(m.get("content", "")) for m in history)])
    words = {fold(w) for w in TOKEN.findall(seen)}
    return all(any(kin(s, w) for w in words) for s in stated(answer))


def stated(text: str) -> set[str]:
    """The names and numbers a text states (folded): its numbers, and the words it capitalises anywhere but at a
    sentence's start."""
    out = set()
    starts = {m.end() for m in SENTENCE_START.finditer(text)}
    for match in TOKEN.finditer(text):
        word = match.group(0)
        if word.isdigit() or (match.start() not in starts and word[0].isupper() and len(word) > 1):
            out.add(fold(word))
    return out


def fold(word: str) -> str:
    """A word as the checks compare it: lowercased, without accents."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", word.lower()) if not unicodedata.combining(c))
    return plain.replace("đ", "d")


def kin(a: str, b: str) -> bool:
    """Two folded words are forms of one: numbers equal, words sharing their first letters, all but the last of the
    shorter and at most five (a Croatian word's cases: "Mica", "Mici"; "Split", "Splitu"; "programski", "program")."""
    if a.isdigit() or b.isdigit() or min(len(a), len(b)) < 4:
        return a == b  # a number, or a word too short to have forms: "CI", "Go"
    n = min(5, max(3, min(len(a), len(b)) - 1))
    return len(a) >= n and len(b) >= n and a[:n] == b[:n]
