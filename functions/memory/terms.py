"""The full-text half of hybrid recall: which words of a question are its terms.

Postgres has no Croatian stemmer, so a term is a word's first five letters matched as a prefix
(`ledge:*` finds "ledger", "ledgers"; `mack:*` after folding finds "mačka", "mački"). The question is
split by the same parser as the notes (in SQL, see store.RECALL_HYBRID); the function words of English
and Croatian below are dropped, the rest OR'ed, and ts_rank orders the notes that match. The recall
study (studies/recall) measured this beside the vector and chose it.
"""

STEM = 5
# Folded (lower case, no diacritics), as the parser sees them.
STOP = sorted("""
a an the is are am was be do does did i me my mine you your we our us it its of in on at to for from by with and or
but what which who whom when where how why can should will would there this that these those any about again even just
je li su sam si smo ste da ne na u za od iz kod sa koji koja koje kojem kojoj kojim koju koga kome tko sto sta kako kad
kada gdje koliko zasto ili ali mi ti moj moja moje mom moga ima imam imamo nam vam se bi bih ce cu ako nije nisi sve pa
jer kao
""".split())
