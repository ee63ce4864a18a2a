"""How the person is spoken to: which language a text is written in (py3langid), which one an answer is to be in,
what the person asked to be called, and the few words the platform has an agent say in each language."""

from __future__ import annotations

import re
import threading
from typing import Any

SAME_LANGUAGE = {"bs": "hr", "sr": "hr", "me": "hr"}  # one language to a reader; the identifier splits it
# "No linguistic content" (ISO 639-2): what the identifier says of ids, numbers and code. It is no person's language,
# and taking it for one would refuse every summary written in words.
NO_LANGUAGE = "zxx"
NAMES = {
    "en": "English",
    "hr": "Croatian",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "sl": "Slovenian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "pl": "Polish",
    "cs": "Czech",
    "hu": "Hungarian",
}
CONFIDENT = 0.6
LEAD = 2.0  # how far above the next a short text's likeliest language must rank to be taken as its language
# A language as a preference names it, in English or in Croatian (the stems of its inflected forms).
NAMED = [
    (re.compile(r"\b(?:english|engl?esk)", re.I), "en"),
    (re.compile(r"\b(?:croatian|hrvatsk)", re.I), "hr"),
    (re.compile(r"\b(?:german|deutsch|njema[čc]k)", re.I), "de"),
    (re.compile(r"\b(?:french|fran[cć]usk)", re.I), "fr"),
    (re.compile(r"\b(?:spanish|[šs]panjolsk)", re.I), "es"),
    (re.compile(r"\b(?:italian|talijansk)", re.I), "it"),
    (re.compile(r"\b(?:slovenian|slovensk)", re.I), "sl"),
]
# What an agent says when asked about the person and nothing it was told says it.
UNNOTED = {"en": "I don't have that noted.", "hr": "Nemam to zabilježeno."}

_identifier = None
_identifier_lock = threading.Lock()


def language(text: str) -> str | None:
    """The text's language (a group code), or None when the identifier is not confident."""
    ranked = _groups(text)
    return ranked[0][0] if ranked and ranked[0][1] >= CONFIDENT else None


def likely_language(text: str) -> str | None:
    """The text's most likely language: the confident one, or one the identifier ranks far above the next (a short
    question, "Koji editor koristim?", is seldom confident), else None."""
    ranked = _groups(text)
    if not ranked:
        return None
    if ranked[0][1] >= CONFIDENT or len(ranked) == 1 or ranked[0][1] >= LEAD * ranked[1][1]:
        return ranked[0][0]
    return None


def _groups(text: str) -> list[tuple[str, float]]:
    """The languages the identifier ranks highest for the text, as groups (`SAME_LANGUAGE`), likeliest first."""
    global _identifier
    with _identifier_lock:
        if _identifier is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        ranked = _identifier.rank(text)[:10]
    groups: dict[str, float] = {}
    for code, p in ranked:
        if code == NO_LANGUAGE:
            continue
        code = SAME_LANGUAGE.get(code, code)
        groups[code] = groups.get(code, 0.0) + p
    return sorted(groups.items(), key=lambda kv: kv[1], reverse=True)


def answer_language(messages: list[dict[str, Any]], recalled: list[dict[str, Any]]) -> str | None:
    """The language the answer is to be in: the one a recalled preference names, else the one the person's last
    message is written in, else None (unsure: the model follows the conversation)."""
    for entry in recalled:
        if entry.get("kind") == "preference":
            named = {code for pattern, code in NAMED if pattern.search(str(entry.get("text", "")))}
            if len(named) == 1:
                return named.pop()
    last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    return likely_language(last) if isinstance(last, str) and last.strip() else None


# A form of address as a preference asks for it, in English or in Croatian: "Always call me Captain.", "Address me as
# Dr. Horvat.", "Oslovljavaj me s kapetane.", "Zovi me Šefe." The name: a word or two, letters only.
ADDRESSED = re.compile(
    r"\b(?:call|address|oslovljavaj|oslovi|zovi|nazivaj)\s+me(?:\s+(?:as|s|sa|kao))?\s+[\"'“‘]?"
    r"((?-i:[^\W\d_][^\W\d_.'-]*\.?(?:\s+[A-ZČĆŠŽĐ][^\W\d_'-]*)?))",
    re.I,
)
# What follows "call me" without being a name: "Call me when it is done.", "Zovi me sutra."
NOT_NAMES = set(
    "when if back later tomorrow today at on in after before once now please kad kada ako sutra danas poslije".split()
)


def form_of_address(recalled: list[dict[str, Any]]) -> str | None:
    """What a recalled preference asks the person be called, as an answer begins with it ("Captain"), or None."""
    for entry in recalled:
        if entry.get("kind") != "preference":
            continue
        found = ADDRESSED.search(str(entry.get("text", "")))
        if found and found.group(1).split()[0].lower() not in NOT_NAMES:
            name = found.group(1).rstrip(".")
            if name.endswith(" Dr") or name == "Dr":  # "Dr." is an abbreviation, not a sentence's end
                name += "."
            if 1 < len(name) <= 30:
                return name[0].upper() + name[1:]
    return None
