"""The full-text half of hybrid recall: which words of a question are its terms.

Postgres has no Croatian stemmer, so a term is the start of a word matched as a prefix (`ledger:*` finds
"ledger", "ledgers"; `mack:*` after folding finds "mačka", "mačku", "mački"). The question is split by the same parser
as the notes (in SQL, see store.QUESTION_TERMS); the function words of English and Croatian below are
dropped, a word's ending may be cut by its language's suffix rule (a word keeps at least MIN_STEM letters), the
rest is cut to the language's prefix length and OR'ed, and ts_rank orders the notes that match. The recall
study (studies/recall) measured the prefix lengths and the rules; RULES holds what it chose.
"""

from __future__ import annotations

import re

# Folded (lower case, no diacritics), as the parser sees them.
STOP = sorted(
    """
a an the is are am was be do does did i me my mine you your we our us it its of in on at to for from by with and or
but what which who whom when where how why can should will would there this that these those any about again even just
je li su sam si smo ste da ne na u za od iz kod sa koji koja koje kojem kojoj kojim koju koga kome tko sto sta kako kad
kada gdje koliko zasto ili ali mi ti moj moja moje mom moga ima imam imamo nam vam se bi bih ce cu ako nije nisi sve pa
jer kao
""".split()
)

# A question is Croatian if it has a Croatian letter or a Croatian function word, else English: short questions
# are what recall sees, and on them this rule beat a general language identifier (studies/recall).
HR_LETTERS = set("čćžšđ")
HR_WORDS = set(
    "je li su sam si smo ste da ne na u za od iz kod sa koji koja koje kojem kojoj kojim koju koga kome tko "
    "što kako kad kada gdje koliko zašto ili ali mi ti moj moja moje mom moga ima imam imamo nam vam se bi "
    "bih će ću ako nije nisi sve pa jer kao".split()
)

# Croatian inflects by endings: a small general rule set (case endings of nouns and adjectives, common verb
# endings), longest first, so "mačku", "mačke" and "mačka" all become "mack". Written for this, not learned.
HR_SUFFIXES = (
    "ovima evima ijima ama ima ovi evi ova eva ove eve om em og oj ih im ega emu ome amo ate aju emo ete imo "
    "ite ati iti ala ali alo ila ili ilo u a e i o"
).split()
EN_SUFFIXES = "ing ed es s".split()
MIN_STEM = 3


def _ending(suffixes: list[str]) -> str:
    return "(" + "|".join(sorted(suffixes, key=len, reverse=True)) + ")$" if suffixes else ""


# The suffix rules the recall study tries (a regular expression on the folded word; "" cuts nothing).
SUFFIX_RULES = {"none": "", "hr": _ending(HR_SUFFIXES), "en": _ending(EN_SUFFIXES)}
# Per language of the question: the prefix length a term is cut to, and its suffix rule. The recall study's
# held-out part: English 6 letters and Croatian 4 showed the right note for 88.5% of questions (5 and 5: 87.2%),
# at 1.73 other notes (1.64); Croatian's rule cutting endings did no better than 4 letters (the 4 letters already
# end before most endings), so it is off.
RULES = {"en": {"stem": 6, "suffixes": SUFFIX_RULES["none"]}, "hr": {"stem": 4, "suffixes": SUFFIX_RULES["none"]}}


def language(question: str) -> str:
    lowered = question.lower()
    if HR_LETTERS & set(lowered) or HR_WORDS & set(re.findall(r"\w+", lowered)):
        return "hr"
    return "en"


def parameters(question: str) -> dict:
    """What store.QUESTION_TERMS needs besides the question: the language's prefix length and suffix rule."""
    rule = RULES[language(question)]
    return {"stem": rule["stem"], "suffixes": rule["suffixes"], "min_stem": MIN_STEM, "stop": STOP}
