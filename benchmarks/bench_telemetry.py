"""Benchmark: what tracing and metrics add to a turn, exporting to an OTLP/HTTP receiver on loopback vs off.

Not a test; run by hand (2 cores, loopback only, about two minutes):

    .venv/bin/python benchmarks/bench_telemetry.py [--turns 40] [--first-token-ms 0,200]

It starts the parts of bench_model.py (embedded Postgres, the dev issuer, the scripted engine and the
platform_status dev upstream, test doubles of what lies outside the project; platform_status, memory and
the model function under gunicorn), then the same three again with `OTEL_EXPORTER_OTLP_ENDPOINT` naming the
tests' OTLP/HTTP receiver (tests/support/otlp_receiver.py, a test double of a collector, in this process), on the
same database. A turn recalls, calls platform_status twice and answers; the two stacks take turns
alternately (so other load hits both alike), and the client's wall time per turn is compared, p50, for an
engine that answers at once (the worst case for a ratio) and one whose first token takes 200 ms (a small
engine's prefill). Goal: <= 2% added. Writes benchmarks/results/telemetry.json and telemetry.md.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import requests
from bench_model import Bench, parse_sse
from report import command, machine, when, write

from agentfn.devstack.harness.servers import Gunicorn
from agentfn.devstack.otlp_receiver import Receiver

GOAL_RATIO = 1.02


class Traced(Bench):
    def start(self, server: Gunicorn) -> Gunicorn:
        if server.app.startswith("agentfn.model."):  # every turn is one caller's: no day's budget may end the run
            server.env["AGENTFN_DAILY_TOKENS"] = str(10**12)
        return super().start(server)

    def up(self) -> None:
        super().up()
        status, memory, model = self.started
        self.receiver = Receiver()
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": self.receiver.url}
        self.status_on = self.start(
            Gunicorn("agentfn.platform_status.app:create_app()", {**status.env, **otel}, self.tmp / "tool-on.log")
        )
        self.memory_on = self.start(
            Gunicorn("agentfn.memory.app:create_app()", {**memory.env, **otel}, self.tmp / "memory-on.log")
        )
        self.model_on = self.start(
            Gunicorn(
                "agentfn.model.app:create_app()",
                {
                    **self.model_env,
                    "AGENTFN_MEMORY_URL": self.memory_on.url,
                    "AGENTFN_TOOL_PLATFORM_STATUS_URL": self.status_on.url,
                    **otel,
                },
                self.tmp / "model-on.log",
            )
        )
        self.model_off = model

    def down(self) -> None:
        super().down()
        if hasattr(self, "receiver"):
            self.receiver.stop()

    def one(self, base: str, delay: float) -> float:
        sid = self.engine.script(
            {"call": {"name": "platform_status", "arguments": {}}, "delay": delay},
            {"call": {"name": "platform_status", "arguments": {"service": "llm"}}, "delay": delay},
            {"text": "All services are up.", "delay": delay},
        )
        began = time.perf_counter()
        response = requests.post(
            f"{base}/v1/agents/remembering/turns",
            headers=self.headers,
            timeout=60,
            json={"messages": [{"role": "user", "content": f"Status in one sentence? script:{sid}"}]},
        )
        wall = (time.perf_counter() - began) * 1000
        events = parse_sse(response.text)
        if events[-1][0] != "done" or events[0][0] != "recall" or events[-1][1]["steps"] != 2:
            raise RuntimeError(f"the turn was not the one measured: {events[-1]}")
        return wall

    def compare(self, delay: float) -> dict:
        off, on = [], []
        for _ in range(3):
            self.one(self.model_off.url, delay), self.one(self.model_on.url, delay)
        spans_before = len(self.receiver.spans())
        for i in range(self.args.turns):  # alternating, and each side first half the time
            first, second = (self.model_off, self.model_on) if i % 2 else (self.model_on, self.model_off)
            for server in (first, second):
                (off if server is self.model_off else on).append(self.one(server.url, delay))
        time.sleep(6)  # the batches' schedule (5 s by default) lets the last spans arrive
        p50_off, p50_on = statistics.median(off), statistics.median(on)
        return {
            "turns": self.args.turns,
            "off_ms_p50": round(p50_off, 1),
            "on_ms_p50": round(p50_on, 1),
            "added_ms_p50": round(p50_on - p50_off, 2),
            "ratio": round(p50_on / p50_off, 4),
            "paired_added_ms_p50": round(statistics.median(b - a for a, b in zip(off, on, strict=True)), 2),
            "spans_per_turn": round((len(self.receiver.spans()) - spans_before) / self.args.turns, 1),
            "met": p50_on / p50_off <= GOAL_RATIO,
        }


def markdown(results: dict) -> str:
    lines = [
        "# Telemetry benchmark",
        "",
        f"{results['when']}, {results['machine']}; `{results['command']}`. A turn: recall, two platform_status "
        "steps, the answer (scripted engine, a test double). Off: no OTLP endpoint. On: every part exporting "
        "traces and metrics to an OTLP/HTTP receiver on loopback (a test double of a collector).",
        "",
        "| engine's first token | turns | off, p50 | on, p50 | added (p50 of pairs) | ratio | spans a turn | goal <= "
        f"{GOAL_RATIO} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, r in results["runs"].items():
        lines.append(
            f"| {label} | {r['turns']} | {r['off_ms_p50']} ms | {r['on_ms_p50']} ms | {r['added_ms_p50']} ms "
            f"({r['paired_added_ms_p50']} ms) | {r['ratio']} | {r['spans_per_turn']} | "
            f"{'met' if r['met'] else 'NOT met'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--first-token-ms", default="0,200")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    bench = Traced(args)
    try:
        bench.up()
        runs = {f"{ms} ms": bench.compare(int(ms) / 1000) for ms in args.first_token_ms.split(",")}
        results = {
            "when": when(),
            "machine": machine(),
            "command": command(),
            "runs": runs,
        }
    finally:
        bench.down()
    write("telemetry", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
