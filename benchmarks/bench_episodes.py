"""Benchmark: /end over whole sessions, through the real default model.

Not a test; run by hand (2 cores, loopback only, about ten minutes; the offline model installed by `./dev up`):

    .venv/bin/python benchmarks/bench_episodes.py [--sessions benchmarks/episode_sessions.yaml]

It starts the local platform (`agentfn up` as a library, on its own ports, with the default offline engine,
Qwen2.5-Coder-1.5B on llama.cpp), then ends each session of the file (5 to 11 turns of the person, English and
Croatian, with runs, pages, notes, approvals, declines and corrections; each its own person) at the code
reviewer's `/end`, and reports:
- how many kept an episode, and that every kept one keeps the episode rules (`faults`) and the person's language;
- how many episodes hold a fact the session did not say, by `invented`: a number or a name (a capitalised word
  inside a sentence) not in the session; and, for a reader to judge, the content words (six letters or more,
  outside the summaries' own vocabulary) whose first five letters begin no word of the session (`unfamiliar`);
- /end's time, p50 and p90, measured by the client.
It writes benchmarks/results/episodes.json and episodes.md, then stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import requests
import yaml

os.environ.setdefault("AGENTFN_DEV_PORT_BASE", "24700")  # beside a `./dev up` on the default ports
from report import ROOT, command, when, write  # noqa: E402

from agentfn.cli.parts import BIN, PORTS  # noqa: E402
from agentfn.devstack.harness.local_platform import local_platform  # noqa: E402
from agentfn.model.episodes import faults, language  # noqa: E402

WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")
# What a summary says of any session in its own words: never a fact of the session.
VOCABULARY = set(
    """person assistant reviewer agent asked wanted requested decided explained suggested confirmed checked
    approved declined refused kept forgot forgotten deleted removed noted remembered preference preferences
    sandbox program code running ran opened opening page pages website address later instead whether because
    session conversation summary answer answers question questions thanked thanks finally then also which
    osoba asistent pitala pitao tražila tražio željela želio odlučila odlučio objasnio objasnila predložio
    odobrila odobrio odbila odbio zapamtio zapamtila zaboravio zaboravila bilješku bilješke bilješka
    sandboxu program programa pokrenuo pokrenula pokretanje stranicu stranica adresu razgovor pitanje
    odgovor odgovore zahvalila zahvalio zatim također umjesto""".split()
)


def invented(episode: str, session: str) -> tuple[list[str], list[str]]:
    """(the numbers and names the session did not say, its unfamiliar content words): see the module's docstring."""
    said = [w.lower() for w in WORD.findall(session)]
    stems = {w[:5] for w in said}
    facts, unfamiliar = [], []
    for sentence in re.split(r"(?<=[.!?])\s+", episode):
        for n, word in enumerate(WORD.findall(sentence)):
            low = word.lower()
            if any(c.isdigit() for c in word):
                if low not in said:
                    facts.append(word)
            elif n > 0 and word[0].isupper() and low[:5] not in stems:
                facts.append(word)
            elif len(low) >= 6 and low not in VOCABULARY and low[:5] not in stems:
                unfamiliar.append(word)
    return facts, unfamiliar


def messages(session: dict) -> list[dict[str, str]]:
    return [
        {"role": "user" if "u" in turn else "assistant", "content": next(iter(turn.values()))} for turn in session["turns"]
    ]


def token(subject: str) -> str:
    done = subprocess.run(
        [str(BIN / "agentfn"), "token", subject, "--groups", "developers,platform-users"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def end(session: dict) -> dict:
    conversation = messages(session)
    subject = f"bench-{session['id']}"
    began = time.monotonic()
    answer = requests.post(
        f"http://127.0.0.1:{PORTS['gateway']}/v1/agents/code-reviewer/sessions/end",
        headers={"Authorization": f"Bearer {token(subject)}"},
        json={"messages": conversation},
        timeout=300,
    )
    seconds = time.monotonic() - began
    outcome = {"id": session["id"], "language": session["language"], "status": answer.status_code, "seconds": seconds}
    if answer.status_code == 201:
        text = answer.json()["episode"]["text"]
        said = " ".join(m["content"] for m in conversation)
        outcome |= {
            "episode": text,
            "faults": faults(text, session["language"], [m["content"] for m in conversation]),
            "written_in": language(text),
        }
        outcome["invented"], outcome["unfamiliar"] = invented(text, said)
    else:
        outcome["problem"] = answer.json()
    return outcome


def report(found: dict) -> str:
    ends = found["ends"]
    kept = [e for e in ends if e["status"] == 201]
    times = [e["seconds"] for e in ends]
    lines = [
        f"# /end over whole sessions ({found['when']})",
        "",
        f"Command: `{found['command']}`; engine {found['engine']}; {len(ends)} sessions "
        f"({sum(e['language'] == 'en' for e in ends)} English, {sum(e['language'] == 'hr' for e in ends)} Croatian).",
        "",
        f"- kept an episode: **{len(kept)} of {len(ends)}**; keeping every rule: "
        f"{sum(not e['faults'] for e in kept)}; in the person's language: "
        f"{sum(e['written_in'] in (None, e['language']) for e in kept)}",
        f"- holding a number or name the session did not say (`invented`): **{sum(bool(e['invented']) for e in kept)}**",
        f"- /end p50 **{statistics.median(times):.1f} s**, p90 {statistics.quantiles(times, n=10)[-1]:.1f} s, "
        f"max {max(times):.1f} s",
        "",
        "| session | status | s | episode | invented | unfamiliar |",
        "|---|---|---|---|---|---|",
    ]
    for e in ends:
        text = e.get("episode") or e.get("problem", {}).get("detail", "")
        invented_, unfamiliar = (", ".join(e.get(k, [])) for k in ("invented", "unfamiliar"))
        lines.append(f"| {e['id']} | {e['status']} | {e['seconds']:.1f} | {text} | {invented_} | {unfamiliar} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=Path, default=ROOT / "benchmarks" / "episode_sessions.yaml")
    args = parser.parse_args()
    sessions = yaml.safe_load(args.sessions.read_text())
    with tempfile.TemporaryDirectory(prefix="agentfn-bench-episodes-") as work:
        Path(work).chmod(0o755)  # Postgres runs as its own user
        stack = local_platform(Path(work) / "var")
        try:
            stack.up()
            ends = []
            for session in sessions:
                ends.append(end(session))
                print(f"{session['id']}: {ends[-1]['status']} in {ends[-1]['seconds']:.1f} s", flush=True)
        finally:
            stack.down()
    found = {
        "when": when(),
        "command": command(),
        "engine": stack.model.alias if stack.model else os.environ.get("AGENTFN_TIER_FAST_MODEL", "?"),
        "ends": ends,
    }
    write("episodes", found, report(found))
    print(report(found))


if __name__ == "__main__":
    main()
