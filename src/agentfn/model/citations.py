"""Which recalled notes an answer cites (M4): the ones it used, never one it was not shown, never one it did not use.

What the engine says it used comes first: a constrained reply's `cited` (its grammar allows only the ids shown in the
turn), or the ids a native engine writes in square brackets. Then the answer is checked against the notes:
- an answer that says nothing about the person is noted ("I don't have that noted") cites nothing;
- a fact (or an episode) is cited only when the answer carries something of it the question did not already say
  (a name, a number, a word of it: "Rust" of "Moj omiljeni programski jezik je Rust."), and then it is cited even
  when the engine forgot to say so;
- a preference shapes an answer rather than being repeated in it: cited when the engine says it followed it.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from .language import UNNOTED

WORD = re.compile(r"[^\W_]+", re.UNICODE)
STEM = 5  # letters that tell a word's forms apart from other words: "Splitu" is "Split", "zabilježeno" "zabil"
# Words that say nothing of what a note holds, in English and Croatian (folded, as `words` folds).
COMMON = set(
    """the and for you your yours are was were has have had that this with what which who whom where when how does
    did not but from they them their there then than its into about also just like only very more most some any
    all can could would should will shall may might must been being use used uses using want wants note notes
    person answer answers always never please
    ali ako ili koji koja koje sto što sta kako gdje kada kad tko moj moja moje moji tvoj tvoja tvoje vas vaš
    vaša nas naš naša ima imam imas imaš jesam nisam nije biti bio bila bilo sam smo ste su jer još samo
    uvijek nikad molim""".split()
)


def cited(
    answer: str, recalled: list[dict[str, Any]], declared: list[str] | None, messages: list[dict[str, Any]]
) -> list[str]:
    """The ids of the recalled notes the answer used, in the order they were shown."""
    if not recalled or unnoted(answer):
        return []
    said = declared if declared is not None else bracketed(answer, [e["id"] for e in recalled])
    question = words(next((m["content"] for m in reversed(messages) if m["role"] == "user"), ""))
    used = words(answer) - question
    out = []
    for entry in recalled:
        if entry.get("kind") == "preference":
            if entry["id"] in said:
                out.append(entry["id"])
        elif (words(entry.get("text", "")) - question) & used:
            out.append(entry["id"])
    return out


def bracketed(answer: str, ids: list[str]) -> list[str]:
    """The recalled ids an answer names (a native engine cites by writing `[id]`); never an id not recalled."""
    lowered = answer.lower()
    return [i for i in ids if i.lower() in lowered]


def unnoted(answer: str) -> bool:
    """The answer says only that the person's question is not noted."""
    folded = " ".join(sorted(words(answer)))
    return bool(folded) and any(folded == " ".join(sorted(words(said))) for said in UNNOTED.values())


def words(text: Any) -> set[str]:
    """The text's content words as stems (lowercased, without accents, first letters): numbers too, short ones too."""
    plain = unicodedata.normalize("NFKD", str(text).lower())
    plain = "".join(c for c in plain if not unicodedata.combining(c)).replace("đ", "d")
    return {w[:STEM] for w in WORD.findall(plain) if (len(w) >= 3 or w.isdigit()) and w not in COMMON}
