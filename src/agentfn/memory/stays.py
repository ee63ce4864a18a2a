"""What forgetting everything leaves, for the receipt's `stays`: every record of any part that still names the
person afterwards, what it holds, why it stays and until when. None of them holds anything the person said.

They stay rather than being deleted or pseudonymised in place, each for its reason below; in short:

- the limits (memory's write rate, the model's tokens and grant calls, pages, runs) would reset, and forgetting
  everything would be a way around them; counting one person's use for the rest of the day needs rows that still
  point at that person, which a pseudonym kept beside its key does as well as the subject does;
- memory's version counter must never start again, or a process could serve forgotten entries it held;
- the model's record of use and the page fetcher's audit are what admins audit (counts, names, hosts, timings).

Memory owns only its own schema: the other parts' records are theirs to keep, and this list says what they keep.
Kept in step with the migrations by tests/memory/test_forget.py (every table with a `subject` column is here,
or is `memory.entries`, which forgetting everything deletes).
"""

from __future__ import annotations

NEVER = "not removed"

STAYS: tuple[dict[str, str], ...] = (
    {
        "part": "memory",
        "record": "memory.quotas",
        "holds": "your subject, your write-rate bucket: a number and a time",
        "why": "forgetting everything does not reset the write rate",
        "until": NEVER,
    },
    {
        "part": "memory",
        "record": "memory.versions",
        "holds": "your subject and a counter of the changes to your entries",
        "why": "each memory process drops the entries it held for you when the counter moves; started again, it "
        "could let a process serve forgotten entries",
        "until": NEVER,
    },
    {
        "part": "model",
        "record": "model.generations",
        "holds": "your subject and one row per turn, session end or tool call: agent, tier, status, token counts, "
        "tool names and timings; never what was said, sent or answered",
        "why": "the record of use admins audit, and the tokens a turn under way holds",
        "until": NEVER,
    },
    {
        "part": "model",
        "record": "model.token_budgets",
        "holds": "your subject and the tokens you spent each UTC day",
        "why": "forgetting everything does not reset the daily token budget",
        "until": NEVER,
    },
    {
        "part": "model",
        "record": "model.grant_calls",
        "holds": "your subject and your calls of each grant each UTC day",
        "why": "a grant's daily limit",
        "until": NEVER,
    },
    {
        "part": "model",
        "record": "model.approvals_used",
        "holds": "your subject and the ids of the approvals you gave, with when they expire",
        "why": "an approval is good once",
        "until": "the next approval anyone gives after it expired",
    },
    {
        "part": "page",
        "record": "page.budget",
        "holds": "your subject and the pages you opened each UTC day",
        "why": "the daily page limit",
        "until": NEVER,
    },
    {
        "part": "page",
        "record": "page.audit",
        "holds": "your subject and each page opened: host, size, status, outcome and timing; never the path or the text",
        "why": "the fetch audit admins read",
        "until": NEVER,
    },
    {
        "part": "run_code",
        "record": "run_code.daily_runs",
        "holds": "your subject and the runs you made each UTC day",
        "why": "the daily run limit",
        "until": "a week, then removed when run_code starts",
    },
    {
        "part": "every part",
        "record": "logs and traces",
        "holds": "subject_hash (user.hash in traces): a pseudonym keyed by the deployment's secret, never your "
        "subject; request lines, and this forgetting as the event forget_all with its count",
        "why": "operators join one person's records without naming them",
        "until": "as long as the deployment's log and trace stores keep them",
    },
)
