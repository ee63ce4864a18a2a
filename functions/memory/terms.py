"""The full-text half of hybrid recall: a question's terms as a Postgres tsquery.

Postgres has no Croatian stemmer, so a term is the word's first five letters matched as a prefix
(`ledge:*` finds "ledger", "ledgers"; `mačk:*` after folding finds "mačka", "mački"). Function words
of English and Croatian are dropped; the rest are OR'ed, and ts_rank orders the notes that match.
The recall study (studies/recall) measured this stand-in beside the vector and chose it.
"""

from __future__ import annotations

import re
import unicodedata

STEM = 5
STOP = set("""
a an the is are am was be do does did i me my mine you your we our us it its of in on at to for from by with and or
but what which who whom when where how why can should will would there this that these those any about again even just
je li su sam si smo ste da ne na u za od iz kod sa koji koja koje kojem kojoj kojim koju koga kome tko sto sta kako kad
kada gdje koliko zasto ili ali mi ti moj moja moje mom moga ima imam imamo nam vam se bi bih ce cu ako nije nisi sve pa
jer kao
""".split())


def fold(text: str) -> str:
    """Lower case without diacritics, as `memory.fold()` (unaccent) does in SQL; đ has no decomposition."""
    plain = unicodedata.normalize("NFKD", text.lower().replace("đ", "d"))
    return "".join(ch for ch in plain if not unicodedata.combining(ch))


def tsquery(question: str) -> str | None:
    """`stem:* | stem:* ...` of the question's content words, or None when it has none."""
    stems = sorted({w[:STEM] for w in re.findall(r"[a-z0-9]+", fold(question)) if w not in STOP and len(w) > 1})
    return " | ".join(f"{s}:*" for s in stems) or None
