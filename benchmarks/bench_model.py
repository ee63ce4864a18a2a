"""Benchmark: the model function's loop against the engine it drives, with the scripted engine and instant tools.

Not a test; run by hand (2 cores, loopback only, about two minutes):

    .venv/bin/python benchmarks/bench_model.py [--turns 30] [--starts 7] [--first-token-ms 200]

It starts embedded Postgres in a fresh /tmp directory, the dev issuer, the scripted engine (the tests'
test double of an LLM, in a process of its own), the platform_status dev upstream (a test double) and
platform_status and memory and the model function under gunicorn, then measures:
1. loop overhead per step: turns of 4 tool calls and an answer, engine and tool instant; the turn's time
   minus the engine's and the tools' (the `done` event's `timing`, measured in the model function), over
   the steps; goal <= 5 ms. Also a turn with no step, for the fixed cost of a turn.
2. time to first delta: POST a turn and read to the first `delta`, against the same engine called
   directly with the openai SDK (streaming, to the first content chunk), alternating, the engine
   answering after --first-token-ms (a small engine's prefill); goal ratio <= 1.1, recall excluded (an
   agent without memory); then the same with recall (an agent with memory), reported separately; and the
   added milliseconds with an engine that answers at once.
3. start-to-ready: gunicorn process start to the first 200 from /readyz, median of --starts, beside bare
   Flask under the same gunicorn config; goal <= 0.5 s (no model is loaded in this function).
4. the approval round trip: a `remember` whose grant leaves approval required takes a turn that asks and a
   turn that carries the approval (the token checked, used up, the call run as its first step); beside one
   turn whose grant waives approval, alternating, --approvals pairs; reported: the added ms, p50 (client
   wall time; the person's own time to answer is not in it).
Writes benchmarks/results/model.json and model.md, then stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import statistics
import sys
import time

import requests
from report import command, machine, when, write

from agentfn.devstack.harness.identity import dev_issuer, subject_hash_key
from agentfn.devstack.harness.servers import Gunicorn, ScriptedEngineProcess, Served, Started
from agentfn.devstack.platform_status import create_app as upstream_app

SERVICE = "system:serviceaccount:agentfn:model"
GOAL_STEP_MS, GOAL_TTFD_RATIO, GOAL_START_S = 5.0, 1.1, 0.5
BARE_FLASK = "from flask import Flask\napp = Flask('bare')\n@app.get('/readyz')\ndef ready():\n    return 'ok'\n"


def registry() -> dict:
    everyone = {
        "subjects": [],
        "groups": ["system:authenticated"],
        "dailyLimit": None,
        "grant": "bench/status",
        "approval": "required",
    }

    def agent(memory, **more):
        return {
            "object": "bench/agent",
            "brief": "Checks the platform.",
            "tier": "fast",
            "memory": memory,
            "limits": {"steps": 4, "tokensPerTurn": 1_000_000, "deadlineSeconds": 60},
            "tools": {"platform_status": everyone, **more},
        }

    return {
        "apiVersion": "agentfn.dev/v1alpha1",
        "kind": "Registry",
        "revision": "sha256:" + "0" * 64,
        "agents": {
            "plain": agent("none"),
            "remembering": agent("preferences"),
            "asking": agent("facts", remember=everyone),
            "trusting": agent("facts", remember={**everyone, "approval": "waived"}),
        },
        "alone": {},
        "mcp": {},
    }


def parse_sse(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if lines and lines[0].startswith("event: "):
            events.append((lines[0][7:], json.loads(lines[1][6:])))
    return events


class Bench(Started):
    prefix = "agentfn-bench-model-"

    def up(self) -> None:
        self.pg = self.postgres()
        self.issuer, served = dev_issuer(self.tmp / "issuer")
        self.keep(served)
        # Raw forwarding: this measures the loop; what token exchange adds is bench_identity.py's measure.
        ident = {
            "AGENTFN_JWT_ISSUER": self.issuer.url,
            "AGENTFN_JWKS_URL": self.issuer.jwks_url,
            "AGENTFN_TOKEN_FORWARDING": "raw",
            "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": SERVICE,
            **subject_hash_key(self.tmp),
        }
        self.engine = self.keep(ScriptedEngineProcess())
        self.upstream = self.keep(Served(upstream_app(ident)))
        status = self.start(
            Gunicorn(
                "agentfn.platform_status.app:create_app()",
                {**ident, "AGENTFN_PLATFORM_STATUS_UPSTREAM_URL": self.upstream.url},
                self.tmp / "tool.log",
            )
        )
        memory = self.start(
            Gunicorn(
                "agentfn.memory.app:create_app()",
                {**ident, "AGENTFN_DATABASE_URL": self.pg.provision("memory", "agentfn_memory")},
                self.tmp / "memory.log",
            )
        )
        (self.tmp / "registry.json").write_text(json.dumps(registry()))
        (self.tmp / "token").write_text(self.issuer.service_token(SERVICE))
        (self.tmp / "approval-key").write_text(secrets.token_urlsafe(48))
        self.model_env = {
            **ident,
            "AGENTFN_DATABASE_URL": self.pg.provision("model", "agentfn_model"),
            "AGENTFN_REGISTRY_FILE": str(self.tmp / "registry.json"),
            "AGENTFN_MEMORY_URL": memory.url,
            "AGENTFN_TOOL_PLATFORM_STATUS_URL": status.url,
            "AGENTFN_SERVICE_TOKEN_FILE": str(self.tmp / "token"),
            "AGENTFN_TIER_FAST_URL": self.engine.url + "/v1",
            "AGENTFN_TIER_FAST_MODEL": "scripted",
            "AGENTFN_APPROVAL_KEY_FILE": str(self.tmp / "approval-key"),
            "AGENTFN_LOG_LEVEL": "WARNING",
        }
        self.model = self.start(Gunicorn("agentfn.model.app:create_app()", self.model_env, self.tmp / "model.log"))
        self.token = self.issuer.caller_token("bench-person", ["platform-users"])
        self.headers = {"Authorization": f"Bearer {self.token}"}
        requests.post(
            memory.url + "/v1/entries",
            headers=self.headers,
            json={"kind": "preference", "text": "Wants the platform status in one sentence.", "source": "bench"},
        )

    # --- 1. loop overhead ---------------------------------------------------------------------------

    def turn(self, agent: str, rounds: list[dict]) -> tuple[list, float]:
        sid = self.engine.script(*rounds)
        began = time.perf_counter()
        response = requests.post(
            f"{self.model.url}/v1/agents/{agent}/turns",
            headers=self.headers,
            timeout=60,
            json={"messages": [{"role": "user", "content": f"Status please. script:{sid}"}]},
        )
        wall = (time.perf_counter() - began) * 1000
        events = parse_sse(response.text)
        if events[-1][0] != "done":
            raise RuntimeError(f"the turn failed: {events[-1]}")
        return events, wall

    def overhead(self) -> dict:
        call = {"call": {"name": "platform_status", "arguments": {}}}
        four, none = [], []
        for _ in range(3):
            self.turn("plain", [call] * 4 + [{"text": "done"}])
        for _ in range(self.args.turns):
            events, wall = self.turn("plain", [call] * 4 + [{"text": "All up."}])
            done = events[-1][1]
            t = done["timing"]
            four.append(
                {
                    "wall": wall,
                    "server": t["ms"],
                    "engine": t["engine_ms"],
                    "tools": t["tools_ms"],
                    "per_step": (t["ms"] - t["engine_ms"] - t["tools_ms"]) / done["steps"],
                }
            )
            events, wall = self.turn("plain", [{"text": "All up."}])
            t = events[-1][1]["timing"]
            none.append({"wall": wall, "loop": t["ms"] - t["engine_ms"]})
        med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
        return {
            "turns": self.args.turns,
            "steps_per_turn": 4,
            "per_step_overhead_ms_p50": round(med(four, "per_step"), 2),
            "per_step_overhead_ms_p90": round(statistics.quantiles([r["per_step"] for r in four], n=10)[-1], 2),
            "turn_ms_p50": round(med(four, "server"), 1),
            "engine_ms_p50": round(med(four, "engine"), 1),
            "tools_ms_p50": round(med(four, "tools"), 1),
            "client_wall_ms_p50": round(med(four, "wall"), 1),
            "no_step_turn_loop_ms_p50": round(med(none, "loop"), 2),
            "goal_ms": GOAL_STEP_MS,
            "met": med(four, "per_step") <= GOAL_STEP_MS,
        }

    # --- 4. the approval round trip -------------------------------------------------------------------

    def post_turn(self, agent: str, content: str, **body) -> tuple[list, float]:
        began = time.perf_counter()
        response = requests.post(
            f"{self.model.url}/v1/agents/{agent}/turns",
            headers=self.headers,
            timeout=60,
            json={"messages": [{"role": "user", "content": content}], **body},
        )
        wall = (time.perf_counter() - began) * 1000
        events = parse_sse(response.text) if response.status_code == 200 else [("error", response.json())]
        if events[-1][0] != "done":
            raise RuntimeError(f"the turn failed: {events[-1]}")
        return events, wall

    def approval(self) -> dict:
        waived, asked = [], []
        for i in range(self.args.approvals + 3):
            keep = {"call": {"name": "remember", "arguments": {"kind": "fact", "text": f"Bench note {i}: tea at noon."}}}
            sid = self.engine.script(keep, {"text": "Kept."})
            _, wall = self.post_turn("trusting", f"Keep my note. script:{sid}")
            sid = self.engine.script(keep, {"text": "Kept."})
            content = f"Keep my note. script:{sid}"
            events, first = self.post_turn("asking", content)
            token = next(d["approval"] for name, d in events if name == "step" and d["status"] == "needs_approval")
            events, second = self.post_turn("asking", content, approvals=[{"token": token, "approve": True}])
            if [d["status"] for name, d in events if name == "step"] != ["started", "ok"]:
                raise RuntimeError(f"the approved call did not run: {events}")
            if i >= 3:  # the first few warm the path
                waived.append(wall)
                asked.append((first, second))
        p50 = statistics.median
        return {
            "pairs": self.args.approvals,
            "waived_turn_ms_p50": round(p50(waived), 1),
            "asking_turn_ms_p50": round(p50(a for a, _ in asked), 1),
            "approving_turn_ms_p50": round(p50(b for _, b in asked), 1),
            "both_turns_ms_p50": round(p50(a + b for a, b in asked), 1),
            "added_ms_p50": round(p50(a + b - w for (a, b), w in zip(asked, waived, strict=True)), 1),
        }

    # --- 2. time to first delta ---------------------------------------------------------------------

    def first_delta(self, agent: str, delay: float) -> float:
        sid = self.engine.script({"text": "All services are up.", "delay": delay})
        began = time.perf_counter()
        with requests.post(
            f"{self.model.url}/v1/agents/{agent}/turns",
            headers=self.headers,
            timeout=60,
            stream=True,
            json={"messages": [{"role": "user", "content": f"Status? script:{sid}"}]},
        ) as response:
            for line in response.iter_lines():
                if line == b"event: delta":
                    took = time.perf_counter() - began
                    break
            else:
                raise RuntimeError("no delta")
            for _ in response.iter_lines():
                pass
        return took * 1000

    def direct(self, client, delay: float) -> float:
        sid = self.engine.script({"text": "All services are up.", "delay": delay})
        began = time.perf_counter()
        stream = client.chat.completions.create(
            model="scripted", stream=True, max_tokens=256, messages=[{"role": "user", "content": f"Status? script:{sid}"}]
        )
        took = None
        for chunk in stream:
            if took is None and chunk.choices and chunk.choices[0].delta.content:
                took = time.perf_counter() - began
        return took * 1000

    def ttfd(self) -> dict:
        import openai

        client = openai.OpenAI(base_url=self.engine.url + "/v1", api_key="none", max_retries=0)
        out = {}
        main_label = f"engine_first_token_ms_{self.args.first_token_ms}"
        for label, delay in ((main_label, self.args.first_token_ms / 1000), ("engine_instant", 0.0)):
            rows = {"direct": [], "plain": [], "remembering": []}
            for _ in range(2):
                self.first_delta("plain", delay), self.first_delta("remembering", delay), self.direct(client, delay)
            for _ in range(self.args.turns):  # alternating, so that other load hits every side alike
                rows["direct"].append(self.direct(client, delay))
                rows["plain"].append(self.first_delta("plain", delay))
                rows["remembering"].append(self.first_delta("remembering", delay))
            p50 = {k: statistics.median(v) for k, v in rows.items()}
            out[label] = {
                "direct_ms_p50": round(p50["direct"], 1),
                "through_model_ms_p50": round(p50["plain"], 1),
                "ratio_recall_excluded": round(p50["plain"] / p50["direct"], 3),
                "added_ms_recall_excluded": round(p50["plain"] - p50["direct"], 1),
                "with_recall_ms_p50": round(p50["remembering"], 1),
                "ratio_with_recall": round(p50["remembering"] / p50["direct"], 3),
                "added_ms_with_recall": round(p50["remembering"] - p50["direct"], 1),
            }
        main = out[main_label]
        return {**out, "goal_ratio": GOAL_TTFD_RATIO, "met": main["ratio_recall_excluded"] <= GOAL_TTFD_RATIO}

    # --- 3. start-to-ready --------------------------------------------------------------------------

    def starts(self) -> dict:
        bare = self.tmp / "bare_app.py"
        bare.write_text(BARE_FLASK)
        model, flask = [], []
        env = {**self.model_env, "PYTHONPATH": str(self.tmp)}
        for i in range(self.args.starts):  # in rounds: each side once per round
            for rows, app in ((model, "agentfn.model.app:create_app()"), (flask, "bare_app:app")):
                server = Gunicorn(app, env, self.tmp / f"start-{i}.log")
                rows.append(server.start(60))
                server.stop()
                time.sleep(0.3)
        return {
            "starts": self.args.starts,
            "model_s_p50": round(statistics.median(model), 3),
            "model_s_min": round(min(model), 3),
            "bare_flask_s_p50": round(statistics.median(flask), 3),
            "goal_s": GOAL_START_S,
            "met": statistics.median(model) <= GOAL_START_S,
        }


def markdown(results: dict) -> str:
    o, t, s = results["loop_overhead"], results["time_to_first_delta"], results["start_to_ready"]
    a = results["approval_round_trip"]
    main = t[f"engine_first_token_ms_{results['first_token_ms']}"]
    instant = t["engine_instant"]
    mark = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    lines = [
        "# Model function benchmark",
        "",
        f"{results['when']}, {results['machine']}; `{results['command']}`. Scripted engine (a test double), "
        "instant tools (platform_status and its dev upstream).",
        "",
        "| measure | result | goal |",
        "|---|---|---|",
        f"| loop overhead per step (turn − engine − tools) / steps, p50 (p90) | {o['per_step_overhead_ms_p50']} ms "
        f"({o['per_step_overhead_ms_p90']} ms) | <= {o['goal_ms']} ms: {mark(o['met'])} |",
        f"| a 4-step turn: total / engine / tools, p50 | {o['turn_ms_p50']} / {o['engine_ms_p50']} / "
        f"{o['tools_ms_p50']} ms | |",
        f"| a turn without steps: loop time beside the engine, p50 | {o['no_step_turn_loop_ms_p50']} ms | |",
        f"| time to first delta / engine direct, engine first token {results['first_token_ms']} ms, recall excluded | "
        f"{main['ratio_recall_excluded']} ({main['through_model_ms_p50']} vs {main['direct_ms_p50']} ms) | "
        f"<= {t['goal_ratio']}: {mark(t['met'])} |",
        f"| the same, with recall | {main['ratio_with_recall']} ({main['with_recall_ms_p50']} ms) | reported |",
        f"| added ms to the first delta, instant engine: without / with recall | {instant['added_ms_recall_excluded']} / "
        f"{instant['added_ms_with_recall']} ms | |",
        f"| start-to-ready under gunicorn, p50 (min); bare Flask p50 | {s['model_s_p50']} s ({s['model_s_min']} s); "
        f"{s['bare_flask_s_p50']} s | <= {s['goal_s']} s: {mark(s['met'])} |",
        f"| approval round trip ({a['pairs']} pairs): asking + approving turn vs one turn with approval waived, p50 | "
        f"{a['asking_turn_ms_p50']} + {a['approving_turn_ms_p50']} ms vs {a['waived_turn_ms_p50']} ms: "
        f"+{a['added_ms_p50']} ms | reported |",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--starts", type=int, default=7)
    parser.add_argument("--first-token-ms", type=int, default=200)
    parser.add_argument("--approvals", type=int, default=30)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the in-process dev upstream's request lines
    with Bench(args) as bench:
        results = {
            "when": when(),
            "machine": machine(),
            "command": command(),
            "first_token_ms": args.first_token_ms,
            "loop_overhead": bench.overhead(),
            "time_to_first_delta": bench.ttfd(),
            "start_to_ready": bench.starts(),
            "approval_round_trip": bench.approval(),
        }
    write("model", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
