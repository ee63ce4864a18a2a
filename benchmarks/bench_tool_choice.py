"""Benchmark: the shipped offline models side by side, on the labelled tool-choice set and the README tour's turns.

Not a test; run by hand (2 cores, loopback only; about 15 minutes for the three models):

    .venv/bin/python -m agentfn.devstack.weights install all
    .venv/bin/python benchmarks/bench_tool_choice.py [--models smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b]

For each model it starts the project's own engine server (`python -m agentfn.devstack.engine_server --model
NAME`, its default slots and context) and drives it the way the model function does in constrained tool
mode: the system prompt and tool listing of `prompt.system` for the code reviewer of examples/ with its
five tools, the recalled notes placed by `prompt.with_notes`, and `engines.Engine.round` (the JSON-Schema
constrained reply, temperature 0, the tier's 160 completion tokens of `agentfn up`). Then:
1. the set (benchmarks/tool_choice.yaml, English and Croatian): a case is right when the model chose the
   labelled tool (or answered, for `none`) with arguments valid against the tool's schema and matching the
   label; x/N per model, and each round's latency;
2. the tour (README's "A five-minute tour"): the preference question with the note recalled, `print(6 * 7)`
   in the sandbox, and a page, as one conversation, `--tours` times; a tool's result is a fixed realistic one
   (run_code printing 42, example.com's text) given back as the loop does, the turn's time is its engine
   rounds (the tools themselves take milliseconds). The set's first message meets a cold engine (it reads
   the whole system prompt, as the first turn after `agentfn up` does); every later request reuses llama.cpp's
   prompt cache (the same system prompt and listing: a stable prefix).
Also each engine's start-to-ready and its resident memory (PSS) after the run.
Writes benchmarks/results/tool_choice.json and tool_choice.md; stops every engine it started.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import select
import statistics
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import jsonschema
import yaml
from report import RESULTS, ROOT, command, machine, when, write

from agentfn.cli.banner import process_tree, pss
from agentfn.devstack import weights
from agentfn.model import prompt
from agentfn.model.citations import cited
from agentfn.model.engines import Cited, Engine, Text, Tier, ToolRequest, Usage
from agentfn.model.tool_table import Tool, _builtins

AGENT = "code-reviewer"
MAX_TOKENS = 160  # `agentfn up`'s fast tier
GOAL_RIGHT, GOAL_LATER_S = 0.9, 20.0
TOUR_NOTE = {"id": "3f2a9c1e-5b7d-4e2a-9c1e-5b7d4e2a9c1e", "kind": "preference", "text": "Answer me in one short sentence."}
TOUR = [
    ("How long should your answers be?", None),
    (
        "Run this Python code in the sandbox: print(6 * 7)",
        {"stdout": "42\n", "stderr": "", "exit_code": 0, "ms": 31, "limit": None},
    ),
    (
        "Open the page https://example.com and read it",
        {
            "url": "https://example.com/",
            "title": "Example Domain",
            "offset": 0,
            "next_offset": None,
            "text": "Example Domain\nThis domain is for use in illustrative examples in documents. You may use this domain "
            "in literature without prior coordination or asking for permission.\n[1] More information...",
            "links": [{"n": 1, "href": "https://www.iana.org/domains/example", "text": "More information..."}],
        },
    ),
]


def reviewer() -> tuple[str, list[Tool]]:
    """The code reviewer of examples/: its brief and its tools, in its order, as the tool table describes them."""
    agent = next(
        d
        for d in yaml.safe_load_all((ROOT / "examples" / "agents.yaml").read_text())
        if d and d["metadata"]["name"] == AGENT
    )
    builtins = _builtins()
    tools = []
    for name in agent["spec"]["tools"]:
        if name in builtins:
            tools.append(builtins[name])
            continue
        d = json.loads(resources.files(f"agentfn.{name}").joinpath("tool.json").read_text())
        tools.append(Tool(d["name"], d["description"], d["input_schema"], False, False, "function"))
    return agent["spec"]["brief"], tools


# --- one engine ----------------------------------------------------------------------------------------


class Served:
    def __init__(self, model: weights.Model, port: int, log: Path):
        self.model, self.log = model, open(log, "wb")
        began = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentfn.devstack.engine_server", "--port", str(port), "--model", model.name],
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        ready, _, _ = select.select([self.process.stdout], [], [], 300)
        line = json.loads(self.process.stdout.readline() or "{}") if ready else {}
        if "ready" not in line:
            self.stop()
            raise SystemExit(f"{model.name}: the engine did not start ({line.get('error', 'no answer')}); see {log}")
        self.url, self.start_s, self.wall_s = line["ready"], line["seconds"], time.monotonic() - began

    def resident(self) -> int:
        return sum(pss(p) for p in process_tree(self.process.pid))

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def ask(engine: Engine, convo: list[dict], tools: list[Tool], notes: list[str] | None = None) -> dict:
    """One round as the loop makes it: the answer's text or the tool call, the notes it says it used, its time and
    tokens."""
    began = time.perf_counter()
    text, call, usage, error, said = [], None, None, None, None
    try:
        for item in engine.round(convo, tools, MAX_TOKENS, time.monotonic() + 300, notes=notes):
            if isinstance(item, Text):
                text.append(item.text)
            elif isinstance(item, ToolRequest):
                call = item
            elif isinstance(item, Cited):
                said = item.ids
            elif isinstance(item, Usage):
                usage = item
    except Exception as failure:  # a reply outside the format is a wrong choice, counted as such
        error = type(failure).__name__ + ":" + str(failure)
    return {
        "s": time.perf_counter() - began,
        "answer": "".join(text),
        "said": said,
        "error": error,
        "tool": call.name if call else None,
        "arguments": call.arguments if call else None,
        "raw": call.raw if call else None,
        "tokens_in": usage.tokens_in if usage else None,
        "tokens_out": usage.tokens_out if usage else None,
    }


def judge(case: dict, reply: dict, tools: dict[str, Tool]) -> str | None:
    """Why the reply is wrong, or None when it is right."""
    if reply["error"]:
        return reply["error"]
    want = case["tool"]
    if want == "none":
        return None if reply["tool"] is None and reply["answer"].strip() else f"called {reply['tool']}"
    if reply["tool"] != want:
        return f"chose {reply['tool'] or 'no tool'}"
    args = reply["arguments"]
    try:
        jsonschema.validate(args, tools[want].input_schema)
    except jsonschema.ValidationError as invalid:
        return f"invalid arguments: {invalid.message}"
    if want == "platform_status" and args.get("service") != case.get("service"):  # only a service the person named
        return f"service {args.get('service')!r}"
    if "code" in case and case["code"].replace(" ", "") not in args["code"].replace(" ", ""):
        return f"code {args['code']!r}"
    if "url" in case and args["url"].rstrip("/") != case["url"].rstrip("/"):
        return f"url {args['url']!r}"
    if "kind" in case and args["kind"] not in case["kind"]:
        return f"kind {args['kind']!r}"
    if "text" in case and not any(w in args["text"].casefold() for w in case["text"]):
        return f"text {args['text']!r}"
    if "id" in case and args["id"] != case["id"]:
        return f"id {args['id']!r}"
    return None


def result_message(name: str, result: dict) -> dict:
    """A tool's result as main's loop gives it to the model in constrained mode."""
    return {"role": "user", "content": f"Result of {name}: {json.dumps(result, ensure_ascii=False)}"}


def tour(engine: Engine, system: str, tools: list[Tool]) -> list[dict]:
    history: list[dict] = []
    turns = []
    for say, result in TOUR:
        history.append({"role": "user", "content": say})
        convo = [{"role": "system", "content": system}, *prompt.with_notes(history, [TOUR_NOTE])]
        rounds = []
        for _ in range(3):  # the loop would allow more; a third round already misses the point of the tour
            reply = ask(engine, convo, tools if len(rounds) < 2 else None, [TOUR_NOTE["id"]])
            rounds.append(reply)
            if reply["tool"] is None:
                break
            convo += [
                {"role": "assistant", "content": reply["raw"]},
                result_message(reply["tool"], result or {"error": "not part of the tour"}),
            ]
        answer = rounds[-1]["answer"]
        history.append({"role": "assistant", "content": answer})
        turns.append(
            {
                "say": say,
                "s": sum(r["s"] for r in rounds),
                "calls": [r["tool"] for r in rounds if r["tool"]],
                "answer": answer,
                "cited": cited(answer, [TOUR_NOTE], rounds[-1]["said"], history),
                "tokens_in": [r["tokens_in"] for r in rounds],
            }
        )
    return turns


def measure(model: weights.Model, port: int, cases: list[dict], tours: int) -> dict:
    brief, tools = reviewer()
    by_name = {t.name: t for t in tools}
    system = prompt.system(
        brief,
        datetime.date.today().isoformat(),
        tools=tools,
        constrained=True,
        memory_tools=True,
        notes=True,
        context_tokens=model.context,
    )
    served = Served(model, port, RESULTS / f".engine-{model.name}.log")
    try:
        engine = Engine(Tier("bench", served.url, model.alias, "constrained", 300.0, MAX_TOKENS, model.context, 0.0))
        rows = []
        for case in cases:
            convo = [
                {"role": "system", "content": system},
                *prompt.with_notes([{"role": "user", "content": case["say"]}], case.get("notes") or []),
            ]
            reply = ask(engine, convo, tools)
            wrong = judge(case, reply, by_name)
            rows.append(
                {
                    "say": case["say"],
                    "lang": case["lang"],
                    "want": case["tool"],
                    "got": reply["tool"] or "none",
                    "arguments": reply["arguments"],
                    "answer": reply["answer"][:200],
                    "wrong": wrong,
                    "s": round(reply["s"], 2),
                    "tokens_in": reply["tokens_in"],
                }
            )
            print(
                f"  {model.name}: {'ok ' if not wrong else 'BAD'} {case['say'][:60]!r} -> {reply['tool'] or 'none'} "
                f"{json.dumps(reply['arguments'], ensure_ascii=False)[:80] if reply['tool'] else ''} "
                f"{wrong or ''} ({reply['s']:.1f} s)",
                flush=True,
            )
        passes = []
        for n in range(tours):
            passes.append(tour(engine, system, tools))
            print(
                f"  {model.name}: tour {n + 1}: " + ", ".join(f"{t['s']:.1f} s {t['calls']}" for t in passes[-1]), flush=True
            )
        resident = served.resident()
    finally:
        served.stop()
    right = [r for r in rows if not r["wrong"]]
    later = [t["s"] for p in passes for t in p[1:]]
    return {
        "model": model.name,
        "alias": model.alias,
        "file_bytes": model.size,
        "start_s": served.start_s,
        "resident_bytes": resident,
        "right": len(right),
        "of": len(rows),
        "right_en": sum(r["lang"] == "en" for r in right),
        "of_en": sum(r["lang"] == "en" for r in rows),
        "right_hr": sum(r["lang"] == "hr" for r in right),
        "of_hr": sum(r["lang"] == "hr" for r in rows),
        "set_round_p50_s": round(statistics.median(r["s"] for r in rows), 2),
        "first_request_cold_s": rows[0]["s"],
        "tour_first_turn_s": round(passes[0][0]["s"], 2),
        "tour_later_turn_p50_s": round(statistics.median(later), 2),
        "cases": rows,
        "tours": passes,
    }


# --- results -------------------------------------------------------------------------------------------


def markdown(results: dict) -> str:
    lines = [
        "# The offline models side by side: tool choice and tour latency",
        "",
        f"{results['when']}, {results['machine']}; `{results['command']}`. The project's engine server (llama.cpp "
        "through xllamacpp, 2 threads, its default slots and context per model), driven through `prompt.system` / "
        "`prompt.with_notes` / `engines.Engine.round` in constrained tool mode, temperature 0. "
        f"Load average {results['load'][0]:.1f} before, {results['load'][1]:.1f} after: the machine's 2 cores were "
        "shared with other work, so absolute times are high and noisy; the models ran one after another in the "
        "same conditions, so their ratios compare.",
        "",
        "| model | right tool, valid arguments | English | Croatian | set round p50 | first request (cold engine) | "
        "tour first turn | later turns p50 | start-to-ready | resident | file |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in results["models"]:
        lines.append(
            f"| {m['model']} | **{m['right']}/{m['of']}** | {m['right_en']}/{m['of_en']} | "
            f"{m['right_hr']}/{m['of_hr']} | {m['set_round_p50_s']:.1f} s | {m['first_request_cold_s']:.1f} s | "
            f"{m['tour_first_turn_s']:.1f} s | **{m['tour_later_turn_p50_s']:.1f} s** | "
            f"{m['start_s']:.1f} s | {m['resident_bytes'] / 2**20:.0f} MiB | {m['file_bytes'] / 1e6:.0f} MB |"
        )
    lines += ["", f"Goals: right >= {GOAL_RIGHT:.0%} of the set; a tour turn after the first <= {GOAL_LATER_S:.0f} s.", ""]
    for m in results["models"]:
        lines += [f"## {m['model']}", "", "Wrong choices:", ""]
        lines += [f"- ({r['lang']}) {r['say']!r}: wanted {r['want']}, {r['wrong']}" for r in m["cases"] if r["wrong"]] or [
            "- none"
        ]
        lines += ["", "The tour, first pass (what the model answered):", ""]
        for t in m["tours"][0]:
            lines.append(
                f"- {t['say']!r} -> calls {t['calls'] or 'none'}, {t['s']:.1f} s, cited {t['cited'] or 'nothing'}: "
                f"{t['answer'][:160]!r}"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(weights.MODELS))
    parser.add_argument("--tours", type=int, default=3)
    parser.add_argument("--port", type=int, default=18831)
    args = parser.parse_args()
    cases = yaml.safe_load((ROOT / "benchmarks" / "tool_choice.yaml").read_text())["cases"]
    load = [os.getloadavg()[0]]
    models = [measure(weights.chosen(name), args.port, cases, args.tours) for name in args.models.split(",")]
    load.append(os.getloadavg()[0])
    results = {"when": when(), "machine": machine(), "command": command(), "load": load, "models": models}
    write("tool_choice", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
