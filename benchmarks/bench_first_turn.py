"""Benchmark: the first turn after `agentfn up` against the turns after it, on the default offline engine.

Not a test; run by hand (2 cores; about 5 minutes):

    .venv/bin/python benchmarks/bench_first_turn.py [--port-base 23400] [--turns 4] [--after 30]

It starts the platform as `./dev up` does (`agentfn up`, in a fresh data folder, the offline engine), waits for
the banner, and as the tour's person (alice, developers and platform-users) keeps the tour's preference, then
asks the code reviewer `--turns` questions that need no tool (the tour's first, then others), each a fresh
conversation, the first `--after` seconds after the banner (a person reading it, opening a shell, exporting a
token and typing): each turn's time (the request to its `done`) and its engine time, and the time from the
start to the first answer. Then Ctrl-C stops the platform. Writes benchmarks/results/first_turn.json and .md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import requests
from report import command, machine, when, write

from agentfn.cli.client import events
from agentfn.devstack.harness.local_platform import Up

BIN = Path(sys.executable).parent
# Questions that need no tool, each a fresh conversation: what a later turn reads anew is its own message (with the
# recalled preference), as the first turn's is; the system prompt before it is the cached prefix, or not.
QUESTIONS = (
    "How long should your answers be?",
    "What is the difference between a list and a tuple?",
    "When should I use a generator in Python?",
    "Is `x == None` good style?",
    "What does `__slots__` do?",
)
PREFERENCE = "Answer me in one short sentence."


def turn(url: str, token: str, question: str) -> dict:
    started = time.monotonic()
    with requests.post(
        f"{url}/v1/agents/code-reviewer/turns",
        headers={"Authorization": f"Bearer {token}"},
        json={"messages": [{"role": "user", "content": question}]},
        stream=True,
        timeout=(5, 600),
    ) as response:
        response.raise_for_status()
        for name, data in events(response.iter_lines(decode_unicode=True)):
            if name == "error":  # a cold engine on a busy machine may pass the agent's deadline
                failed = f"{data.get('title')}: {data.get('detail')}"
                return {"question": question, "s": round(time.monotonic() - started, 2), "failed": failed}
            if name == "done":
                return {
                    "question": question,
                    "s": round(time.monotonic() - started, 2),
                    "engine_s": round(data["timing"]["engine_ms"] / 1000, 2),
                    "tokens_in": data["usage"]["tokens_in"],
                    "rounds": data["usage"]["rounds"],
                }
    raise SystemExit("the stream ended before the turn did")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port-base", type=int, default=23400)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--after", type=float, default=30, help="seconds between the banner and the first turn")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFN_TIER_")}  # the offline engine
    with tempfile.TemporaryDirectory(prefix="agentfn-first-turn-") as home:
        up = Up(Path(home), args.port_base, env)
        url = up.url
        began = time.monotonic()
        try:
            to_banner = up.start(timeout=900)
            token = up.token("alice", "--groups", "developers,platform-users")
            requests.post(
                f"{url}/v1/entries",
                headers={"Authorization": f"Bearer {token}"},
                json={"kind": "preference", "text": PREFERENCE, "source": "tour"},
                timeout=60,
            ).raise_for_status()
            time.sleep(max(0.0, began + to_banner + args.after - time.monotonic()))
            turns = []
            for n in range(args.turns):
                turns.append(turn(url, token, QUESTIONS[n % len(QUESTIONS)]))
                print(f"turn {n + 1}: {turns[-1]}", flush=True)
                if n == 0:
                    to_answer = time.monotonic() - began
            stages = [line for line in up.log.read_text().splitlines() if "✓" in line or "agentfn is up" in line]
        finally:
            up.stop()
    later = [t["s"] for t in turns[1:] if "failed" not in t]
    result = {
        "when": when(),
        "machine": machine(),
        "command": command(),
        "to_banner_s": round(to_banner, 1),
        "after_s": args.after,
        "to_first_answer_s": round(to_answer, 1),
        "turns": turns,
        "first_s": turns[0]["s"],
        "later_mean_s": round(sum(later) / len(later), 2) if later else None,
        "stages": stages,
    }
    lines = [
        "# The first turn after `agentfn up`",
        "",
        f"{result['when']}, {result['machine']}; `{result['command']}`",
        "",
        f"Up to the banner: {result['to_banner_s']} s; the first turn {args.after:g} s after it; from the start to the "
        f"first answer: {result['to_first_answer_s']} s. The code reviewer, with the tour's preference kept, asked a "
        "question that needs no tool, each a fresh conversation:",
        "",
        "| turn | question | time | engine | tokens in | rounds |",
        "|---|---|---|---|---|---|",
        *(
            f"| {n} | {t['question']} | {t['s']:.1f} s | {t['engine_s']:.1f} s | {t['tokens_in']} | {t['rounds']} |"
            if "failed" not in t
            else f"| {n} | {t['question']} | {t['s']:.1f} s | {t['failed']} | | |"
            for n, t in enumerate(turns, 1)
        ),
        "",
    ]
    write("first_turn", result, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
