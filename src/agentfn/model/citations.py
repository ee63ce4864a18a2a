"""Which recalled notes an answer cites (M4): the ones it used, never one it was not shown, never one it did not use.

What the engine says it used comes first: a constrained reply's `cited` (its grammar allows only the ids shown in the
turn), or the ids a native engine writes in square brackets. Then the answer is checked against the notes:
- an answer that says nothing about the person is noted ("I don't have that noted") cites nothing;
- a fact (or an episode) is cited only when the answer carries something of it the question did not already say (a
  word of it); and when the engine forgot to say it used it, when what the answer carries is a name or a number of
  it ("Rust" of "Moj omiljeni programski jezik je Rust.");
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
        text = entry.get("text", "")
        if entry.get("kind") == "preference":
            carried = entry["id"] in said
        elif entry["id"] in said:
            carried = bool((words(text) - question) & used)
        else:
            carried = bool((words(text, names_only=True) - question) & used)
        if carried:
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


def words(text: Any, names_only: bool = False) -> set[str]:
    """The text's content words as stems (lowercased, without accents, first letters), numbers too; `names_only`: only
    its numbers and the words it capitalises after its first (a name: "Rust", "Zagreb", "GitHub")."""
    found = WORD.findall(str(text))
    if names_only:
        found = [w for i, w in enumerate(found) if w.isdigit() or (i > 0 and not w.islower())]
    out = set()
    for word in found:
        plain = "".join(c for c in unicodedata.normalize("NFKD", word.lower()) if not unicodedata.combining(c))
        plain = plain.replace("đ", "d")
        if (len(plain) >= 3 or plain.isdigit()) and plain not in COMMON:
            out.add(plain[:STEM])
    return out
