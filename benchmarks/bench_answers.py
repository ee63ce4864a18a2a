"""Benchmark: the answer a person gets from the code reviewer, through the real default offline model.

Not a test; run by hand (2 cores, loopback only; about 25 minutes for the whole set on 2 shared cores, the offline
model installed by `./dev up`):

    nice -n 5 .venv/bin/python benchmarks/bench_answers.py [--cases benchmarks/answer_cases.yaml] [--only N]
        [--no-sessions] [--rejudge benchmarks/results/answers.json]

It starts the local platform (`agentfn up` as a library, on its own ports, the default offline engine,
Qwen2.5-Coder-1.5B on llama.cpp), then:
1. each case of benchmarks/answer_cases.yaml (`--only N`: the first N): a fresh person (a token of the dev issuer,
   groups developers and platform-users) whose 2-4 notes are kept through memory's door (`POST /v1/entries`), then
   one turn to the code reviewer with the earlier conversation and the question; from its events: the notes
   recalled (with their similarity), the ids cited (`done.cited`), the tool calls (every `step`; one waiting for
   approval is declined by not answering it), the answer, its language, the turn's wall time;
2. unless `--no-sessions`: the short sessions below (2-3 turns of the person, English and Croatian, each asking for
   a run in the sandbox, a note kept or the platform's status), played live: every call awaiting approval is
   approved (the same conversation sent again with `approvals`, as `agentfn chat` does); then `/end` with the
   conversation (up to the person's last message, as `agentfn chat` sends it); and the 20 scripted sessions of
   benchmarks/episode_sessions.yaml through `/end` (bench_episodes' own functions).

The figures, each beside its goal, for all cases and per the question's (a session's) language:
- right fact: of the cases with an expected `fact`, those whose answer contains one of its strings (case-folded);
- right note cited: of the cases whose expected note was recalled, those whose `done.cited` names it;
- citations of unused notes: ids in `done.cited` other than the case's expected note (any id, for a case without
  one), per 20 answers;
- invented (questions no note answers): answers that do not say the note is missing ("don't have that noted",
  "nemam to zabilježeno" and close variants, `UNNOTED`), or hold a digit, or a capitalised word not first in its
  sentence that neither the notes nor the question have; "says it has no note" is the first part alone;
- preferences kept: of the preference cases, those passing every check (at most N words, at most N sentences, the
  form of address, the language);
- right language: of the answers of three words or more (citations taken out), those that py3langid ranks in the
  expected language first (Bosnian, Serbian and Montenegrin count as Croatian, as `episodes.language` groups them);
- tool calls where the notes or the conversation answer: of the cases with an expected note or an earlier
  conversation, those whose turn asked for any tool;
- episodes kept: of the sessions that did something (a scripted one, by its script; a live one, when a tool ran),
  those whose `/end` kept an episode; its faults and language are listed;
- reported beside them, without a goal: the cases whose expected note memory recalled at all (what the model could
  cite), and the live sessions in which a tool ran;
- a turn's p50 (the single-turn cases, request to `done`) and `/end`'s p50 (the 20 scripted sessions, comparable
  with benchmarks/results/episodes.md); goals: 10% over 3.6 s and 14.3 s.
Writes benchmarks/results/answers.json and answers.md, prints the table, and stops everything it started.
`--rejudge FILE` judges the answers of a results file again with these checks (no run) and writes it anew.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path

import requests
import yaml

os.environ.setdefault("AGENTFN_DEV_PORT_BASE", "25500")  # beside `./dev up` and the other benchmarks' platforms
from bench_episodes import end, token  # noqa: E402
from py3langid.langid import MODEL_FILE, LanguageIdentifier  # noqa: E402
from report import ROOT, command, machine, p50, when, write  # noqa: E402

from agentfn.cli.client import events  # noqa: E402
from agentfn.cli.parts import PORTS  # noqa: E402
from agentfn.devstack.harness.local_platform import local_platform  # noqa: E402
from agentfn.model.episodes import CITATION  # noqa: E402
from agentfn.model.language import SAME_LANGUAGE  # noqa: E402

AGENT = "code-reviewer"
GATEWAY = f"http://127.0.0.1:{PORTS['gateway']}"
TODAY = {"turn_s": 3.6, "end_s": 14.3}  # the p50s measured before the answers were worked on
UNNOTED = {
    "en": re.compile(
        r"\b(?:don['’]?t|do not)\s+have\s+(?:[\w'’]+\s+){0,4}noted|\bnot\s+(?:been\s+)?noted|"
        r"\bno\s+(?:such\s+)?note|\bhave\s+no\s+(?:such\s+)?notes?\b",
        re.I,
    ),
    "hr": re.compile(
        r"\bnemam\s+(?:\w+\s+){0,3}zabilje[žz]\w*|\bnije\s+(?:\w+\s+)?zabilje[žz]\w*|"
        r"\bnemam\s+(?:\w+\s+){0,2}bilje[šs]k\w*|\bnema\s+(?:\w+\s+){0,2}bilje[šs]k\w*",
        re.I,
    ),
}
WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")
# Short sessions played live: (id, language, the person's messages); each asks for something a tool does.
SESSIONS = [
    ("short-en-run", "en", ["Run this in the sandbox: print(6 * 7)", "What did it print?"]),
    ("short-en-remember", "en", ["Remember that I prefer tabs over spaces.", "Thanks, that's all."]),
    ("short-en-sorted", "en", ["Run print(sorted([3, 1, 2])) in the sandbox.", "Good, thanks."]),
    ("short-en-team", "en", ["Please remember that I work on the billing team.", "What do you know about me?", "Thanks."]),
    ("short-en-both", "en", ["Run print(len('review')) for me.", "Remember that I like Python examples.", "Bye."]),
    ("short-en-status", "en", ["Is the platform up right now?", "Thanks."]),
    ("short-hr-run", "hr", ["Pokreni ovaj Python kod u sandboxu: print(2 ** 10)", "Što je ispisao?"]),
    ("short-hr-remember", "hr", ["Zapamti da volim tabove.", "Hvala, to je sve."]),
    ("short-hr-upper", "hr", ["Izvrši ovo u sandboxu: print('zdravo'.upper())", "Hvala."]),
    ("short-hr-team", "hr", ["Zapamti da radim u timu za naplatu.", "Što znaš o meni?", "Hvala ti."]),
    ("short-hr-both", "hr", ["Pokreni print(sum(range(5))) u sandboxu.", "Zapamti da volim primjere u Pythonu.", "Bok."]),
    ("short-hr-status", "hr", ["Radi li platforma trenutno?", "Hvala."]),
]
MAX_ASKS = 4  # approvals in a row for one message, as `agentfn chat`

# --- judging the answer (plain checks, never the model being judged) ---------------------------------------

_identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def plain(answer: str) -> str:
    """The answer without its citations (`[id]`)."""
    return " ".join(CITATION.sub("", answer).split())


def language(text: str) -> str | None:
    """The language py3langid ranks first (groups summed), or None for an answer under three words."""
    if len(text.split()) < 3:
        return None
    groups: dict[str, float] = {}
    for code, p in _identifier.rank(text)[:10]:
        groups[SAME_LANGUAGE.get(code, code)] = groups.get(SAME_LANGUAGE.get(code, code), 0.0) + p
    return max(groups, key=groups.get)


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def invented(text: str, case: dict) -> list[str]:
    """What makes an answer to a question no note answers an invented one (module docstring); empty: none."""
    found = [] if UNNOTED[case["lang"]].search(text) or UNNOTED["en"].search(text) else ["no 'not noted'"]
    known = {w.lower() for w in WORD.findall(" ".join([case["ask"], *(n["text"] for n in case["notes"])]))}
    for sentence in sentences(text):
        for n, word in enumerate(WORD.findall(sentence)):
            if any(c.isdigit() for c in word):
                found.append(word)
            elif n > 0 and word[0].isupper() and word != "I" and word.lower() not in known:
                found.append(word)
    return found


def preference_faults(text: str, checks: dict) -> list[str]:
    found = []
    if "words" in checks and len(text.split()) > checks["words"]:
        found.append(f"{len(text.split())} words > {checks['words']}")
    if "sentences" in checks and len(sentences(text)) > checks["sentences"]:
        found.append(f"{len(sentences(text))} sentences > {checks['sentences']}")
    if "address" in checks and not any(a.casefold() in text.casefold() for a in checks["address"]):
        found.append(f"no {checks['address'][0]!r}")
    if "language" in checks and language(text) != checks["language"]:
        found.append(f"in {language(text)}, not {checks['language']}")
    return found


def judge(case: dict, row: dict) -> dict:
    """The case's verdicts; None where a figure does not apply to it."""
    want, text = case["expect"], plain(row["answer"])
    note = row["note_ids"][want["note"]] if "note" in want else None
    recalled = [r["id"] for r in row["recalled"]]
    return {
        "fact": any(f.casefold() in text.casefold() for f in want["fact"]) if "fact" in want else None,
        "note_recalled": note in recalled if note else None,
        "note_cited": note in row["cited"] if note and note in recalled else None,
        "unused_cited": len([i for i in row["cited"] if i != note]),
        "says_unnoted": bool(UNNOTED[case["lang"]].search(text) or UNNOTED["en"].search(text))
        if want.get("unnoted")
        else None,
        "invented": invented(text, case) if want.get("unnoted") else None,
        "preference": preference_faults(text, want["preference"]) if "preference" in want else None,
        "language": (row["written_in"] == want["language"]) if row["written_in"] else None,
        "tool_called": bool(row["tools"]) if "note" in want or case.get("before") else None,
    }


# --- the run ----------------------------------------------------------------------------------------------


def turn(auth: str, conversation: list[dict], approvals: list[dict] | None = None) -> dict:
    """One turn through the gateway: what its events said, and its wall time."""
    began = time.monotonic()
    out: dict = {"recalled": [], "steps": {}, "answer": "", "cited": [], "pending": [], "error": None}
    pieces = []
    body = {"messages": conversation, **({"approvals": approvals} if approvals else {})}
    with requests.post(
        f"{GATEWAY}/v1/agents/{AGENT}/turns", headers={"Authorization": auth}, json=body, stream=True, timeout=(5, 600)
    ) as response:
        if response.status_code >= 400:
            out["error"] = f"{response.status_code} {response.text[:200]}"
        else:
            for name, data in events(response.iter_lines(decode_unicode=True)):
                if name == "recall":
                    out["recalled"] = [
                        {"id": e["id"], "similarity": round(e.get("similarity") or 0, 3)} for e in data.get("entries", [])
                    ]
                elif name == "step":
                    out["steps"][data["n"]] = data
                elif name == "delta":
                    pieces.append(data.get("text", ""))
                elif name == "done":
                    out["cited"], out["pending"] = data.get("cited") or [], data.get("pending") or []
                elif name == "error":
                    out["error"] = f"{data.get('title')}: {data.get('detail')}"
    out["answer"], out["s"] = "".join(pieces), round(time.monotonic() - began, 2)
    return out


def conversation_of(case: dict) -> list[dict]:
    earlier = [{"role": next(iter(m)), "content": next(iter(m.values()))} for m in case.get("before") or []]
    return [*earlier, {"role": "user", "content": case["ask"]}]


def run_case(case: dict) -> dict:
    auth = "Bearer " + token("answers-" + case["id"])
    note_ids = []
    for note in case["notes"]:
        kept = requests.post(
            f"{GATEWAY}/v1/entries",
            headers={"Authorization": auth},
            json={"kind": note["kind"], "text": note["text"], "source": "bench"},
            timeout=60,
        )
        kept.raise_for_status()
        note_ids.append(kept.json()["id"])
    got = turn(auth, conversation_of(case))
    row = {
        "id": case["id"],
        "lang": case["lang"],
        "note_ids": note_ids,
        "recalled": got["recalled"],
        "cited": got["cited"],
        "tools": [s["tool"] for s in got["steps"].values()],
        "answer": got["answer"],
        "written_in": language(plain(got["answer"])),
        "s": got["s"],
        "error": got["error"],
    }
    row["verdict"] = judge(case, row)
    return row


def play(session: tuple[str, str, list[str]]) -> dict:
    """A short session played live, every call approved, then ended at /end (bench_episodes' `end`)."""
    name, lang, said = session
    auth = f"Bearer {token(f'bench-{name}')}"
    conversation: list[dict] = []
    ran = []
    for text in said:
        conversation.append({"role": "user", "content": text})
        approvals = None
        for _ in range(MAX_ASKS + 1):
            got = turn(auth, conversation, approvals)
            ran += [s["tool"] for s in got["steps"].values() if s.get("status") == "ok"]
            asked = [got["steps"][n] for n in got["pending"] if n in got["steps"]]
            if got["error"] or not asked:
                break
            approvals = [{"token": s["approval"], "approve": True} for s in asked]
        if got["answer"].strip():
            conversation.append({"role": "assistant", "content": got["answer"]})
    while conversation[-1]["role"] != "user":
        conversation.pop()  # the door takes a conversation that ends with the person's message
    turns = [{"u" if m["role"] == "user" else "a": m["content"]} for m in conversation]
    ended = end({"id": name, "language": lang, "turns": turns})
    return {**ended, "ran": ran, "did_something": bool(ran), "turns": turns}


# --- the report -------------------------------------------------------------------------------------------


def share(rows: list[dict], key: str, good=lambda v: v) -> tuple[int, int]:
    judged = [r["verdict"][key] for r in rows if r["verdict"][key] is not None]
    return sum(1 for v in judged if good(v)), len(judged)


def figures(rows: list[dict], ends: list[dict], scripted: list[dict]) -> list[tuple[str, str, str, bool | None]]:
    """(figure, value, goal, met) for these cases and sessions."""

    def pct(n: int, of: int) -> str:
        return f"{n}/{of} ({n / of:.0%})" if of else "-"

    out = []
    for label, key, goal, good, ok in (
        ("answer holds the right fact", "fact", ">= 90%", lambda v: v, lambda n, of: n >= 0.9 * of),
        ("right note cited when recalled", "note_cited", ">= 90%", lambda v: v, lambda n, of: n >= 0.9 * of),
        ("preferences kept", "preference", ">= 90%", lambda v: not v, lambda n, of: n >= 0.9 * of),
        ("answers in the right language", "language", ">= 95%", lambda v: v, lambda n, of: n >= 0.95 * of),
        ("tool calls where notes/conversation answer", "tool_called", "<= 5%", lambda v: v, lambda n, of: n <= 0.05 * of),
    ):
        n, of = share(rows, key, good)
        out.append((label, pct(n, of), goal, ok(n, of) if of else None))
    unused = sum(r["verdict"]["unused_cited"] for r in rows)
    out.append(
        (
            "citations of unused notes, per 20 answers",
            f"{unused * 20 / len(rows):.2f} ({unused} in {len(rows)})" if rows else "-",
            "<= 1",
            unused * 20 <= len(rows) if rows else None,
        )
    )
    n, of = share(rows, "invented", lambda v: bool(v))
    out.append(("no-note questions answered with an invented fact", f"{n} of {of}", "0", n == 0 if of else None))
    n, of = share(rows, "says_unnoted")
    out.append(("no-note questions: says it has no note", pct(n, of), "(all)", n == of if of else None))
    n, of = share(rows, "note_recalled")
    out.append(("expected note recalled (memory, not the model)", pct(n, of), "-", None))
    doing = [e for e in ends if e.get("did_something", True)]
    kept = sum(e["status"] == 201 for e in doing)
    out.append(
        ("sessions that did something keep an episode", pct(kept, len(doing)), "all", kept == len(doing) if doing else None)
    )
    live = [e for e in ends if "did_something" in e]
    out.append(("live short sessions where a tool ran", f"{sum(e['did_something'] for e in live)}/{len(live)}", "-", None))
    times = [r["s"] for r in rows if not r["error"]]
    goal = TODAY["turn_s"] * 1.1
    out.append(
        ("a turn's p50", f"{p50(times):.1f} s" if times else "-", f"<= {goal:.2f} s", p50(times) <= goal if times else None)
    )
    times, goal = [e["seconds"] for e in scripted], TODAY["end_s"] * 1.1
    out.append(
        (
            "/end's p50 (scripted sessions)",
            f"{p50(times):.1f} s" if times else "-",
            f"<= {goal:.1f} s",
            p50(times) <= goal if times else None,
        )
    )
    times = [e["seconds"] for e in live]
    out.append(("/end's p50 (short live sessions)", f"{p50(times):.1f} s" if times else "-", "-", None))
    return out


def what_failed(r: dict) -> list[str]:
    """A case's failures, briefly."""
    v, what = r["verdict"], []
    if r["error"]:
        what.append(f"error {r['error'][:80]}")
    if v["fact"] is False:
        what.append("fact missing")
    if v["note_recalled"] is False:
        what.append("note not recalled")
    if v["note_cited"] is False:
        what.append("note not cited")
    if v["unused_cited"]:
        what.append(f"{v['unused_cited']} unused cited")
    if v["invented"]:
        what.append(f"invented ({', '.join(v['invented'][:4])})")
    if v["preference"]:
        what.append(f"preference ({'; '.join(v['preference'])})")
    if v["language"] is False:
        what.append(f"wrong language ({r['written_in']})")
    if r["tools"]:
        what.append(f"called {', '.join(r['tools'])}")
    return what


def failures(rows: list[dict], ends: list[dict]) -> list[str]:
    lines = [f"- {r['id']}: {', '.join(what_failed(r))}: {plain(r['answer'])[:140]!r}" for r in rows if what_failed(r)]
    for e in ends:
        if e["status"] != 201 and e.get("did_something", True):
            lines.append(f"- {e['id']}: no episode ({e['status']}: {e.get('problem', {}).get('detail', '')[:100]})")
        elif e["status"] == 201 and e["faults"]:
            lines.append(f"- {e['id']}: episode faults {', '.join(e['faults'])}")
    return lines


def table(results: dict) -> str:
    rows, ends, scripted = results["cases"], results["sessions"] + results["scripted"], results["scripted"]
    parts = {
        lang: figures(
            [r for r in rows if r["lang"] == lang],
            [e for e in ends if e["language"] == lang],
            [e for e in scripted if e["language"] == lang],
        )
        for lang in ("en", "hr")
    }
    lines = ["| figure | all | en | hr | goal | met |", "|---|---|---|---|---|---|"]
    for n, (label, value, goal, met) in enumerate(figures(rows, ends, scripted)):
        mark = {True: "yes", False: "**no**", None: ""}[met]
        lines.append(f"| {label} | {value} | {parts['en'][n][1]} | {parts['hr'][n][1]} | {goal} | {mark} |")
    return "\n".join(lines)


def markdown(results: dict) -> str:
    rows = results["cases"]
    hr = sum(r["lang"] == "hr" for r in rows)
    lines = [
        "# The answer a person gets, through the default offline model",
        "",
        f"{results['when']}, {results['machine']} at the end ({results['load'][0]:.1f} at the start); "
        f"`{results['command']}`; engine {results['engine']}. {len(rows)} single-turn cases ({hr} Croatian), "
        f"{len(results['sessions'])} short sessions played live, {len(results['scripted'])} scripted sessions at "
        "/end. Figures as defined in benchmarks/bench_answers.py; en/hr: the question's (session's) language.",
        "",
        table(results),
        "",
        "## What failed",
        "",
        *(failures(rows, results["sessions"] + results["scripted"]) or ["- nothing"]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=ROOT / "benchmarks" / "answer_cases.yaml")
    parser.add_argument("--only", type=int, default=None, help="the first N cases")
    parser.add_argument("--no-sessions", action="store_true", help="the single-turn cases only")
    parser.add_argument("--rejudge", type=Path, help="judge a results JSON's answers again (no run), into its files")
    args = parser.parse_args()
    cases = yaml.safe_load(args.cases.read_text())[: args.only]
    if args.rejudge:
        results = json.loads(args.rejudge.read_text())
        by_id = {c["id"]: c for c in cases}
        for row in results["cases"]:
            row["written_in"] = language(plain(row["answer"]))
            row["verdict"] = judge(by_id[row["id"]], row)
        return report(args.rejudge.stem, results)
    scripts = [] if args.no_sessions else yaml.safe_load((ROOT / "benchmarks" / "episode_sessions.yaml").read_text())
    load = [os.getloadavg()[0]]
    rows, sessions, scripted = [], [], []
    with tempfile.TemporaryDirectory(prefix="agentfn-bench-answers-") as work:
        Path(work).chmod(0o755)  # Postgres runs as its own user
        stack = local_platform(Path(work) / "var")
        try:
            stack.up()
            for case in cases:
                rows.append(run_case(case))
                r = rows[-1]
                print(f"{r['id']}: {r['s']:.1f} s, {what_failed(r) or 'ok'}: {plain(r['answer'])[:90]!r}", flush=True)
            for session in [] if args.no_sessions else SESSIONS:
                sessions.append(play(session))
                print(f"{session[0]}: ran {sessions[-1]['ran']}, /end {sessions[-1]['status']}", flush=True)
            for script in scripts:
                scripted.append(end(script))
                print(f"{script['id']}: /end {scripted[-1]['status']} in {scripted[-1]['seconds']:.1f} s", flush=True)
        finally:
            stack.down()
    load.append(os.getloadavg()[0])
    results = {
        "when": when(),
        "machine": machine(),
        "load": load,
        "command": command(),
        "engine": stack.model.alias if stack.model else os.environ.get("AGENTFN_TIER_FAST_MODEL", "?"),
        "cases": rows,
        "sessions": sessions,
        "scripted": scripted,
    }
    report("answers", results)


def report(name: str, results: dict) -> None:
    rows, sessions, scripted = results["cases"], results["sessions"], results["scripted"]
    results["figures"] = {
        label: {"value": value, "goal": goal, "met": met}
        for label, value, goal, met in figures(rows, sessions + scripted, scripted)
    }
    write(name, results, markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
