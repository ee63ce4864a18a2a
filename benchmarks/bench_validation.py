"""Benchmark: a hostile-pattern body's validation time against a plain one, side by side, bare and through
memory's door; and the former validator (the quadratic not-blank pattern, tried on texts over their
maxLength) on the same hostile bodies, for scale.

Not a test; run by hand (2 cores, loopback only, about a minute, most of it the former validator):

    .venv/bin/python benchmarks/bench_validation.py [--runs 30] [--no-former]

1. bare: `shared.validation.Schema.check` on memory's CreateEntry and Recall and the model function's
   turn schema, each with a plain valid body, a plain refused body (blank text) and hostile bodies (a long
   text of letters or spaces ending in NUL, over and within maxLength): p50 and max of --runs;
2. former: the same hostile bodies once through Draft 2020-12 with the former pattern
   `^[^\\0]*[^\\0 blanks][^\\0]*$` (what the doors ran before), and the pattern alone at growing lengths;
3. door: memory under gunicorn on embedded Postgres, `POST /v1/entries` with a plain refused body and the
   hostile ones (each a 422 problem), and a plain valid body (a 201: embedding and insert, for scale).
It writes benchmarks/results/validation.json and validation.md, then stops everything it started.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import re
import shutil
import statistics
import time
from pathlib import Path

import requests
from jsonschema import Draft202012Validator
from report import command, machine, when, write

from agentfn.devstack.harness.identity import dev_issuer, subject_hash_key
from agentfn.devstack.harness.postgres import Postgres, postgres_dir
from agentfn.devstack.harness.servers import Gunicorn
from agentfn.memory import schemas as memory_schemas
from agentfn.model import schemas as model_schemas
from agentfn.shared.problems import ProblemError
from agentfn.shared.validation import Schema

FORMER_NOT_BLANK = "^[^\\u0000]*[^\\u0000 \\t\\n\\r\\f\\v][^\\u0000]*$"
OK = {"kind": "fact", "text": "The ledger listens on 7311.", "source": "chat"}
LONG = 60_000  # memory's body limit is 64 KiB


def user(content: str) -> dict:
    return {"role": "user", "content": content}


# (schema name, body name, body): "plain" bodies first, then the hostile ones.
BODIES = [
    ("memory CreateEntry", "plain, valid", OK),
    ("memory CreateEntry", "plain, refused (blank text)", {**OK, "text": "   "}),
    ("memory CreateEntry", "hostile: 60,000 letters + NUL (over maxLength)", {**OK, "text": "a" * LONG + "\0"}),
    ("memory CreateEntry", "hostile: 60,000 spaces + NUL (over maxLength)", {**OK, "text": " " * LONG + "\0"}),
    ("memory CreateEntry", "hostile: 999 letters + NUL (within maxLength)", {**OK, "text": "a" * 999 + "\0"}),
    ("memory Recall", "plain, valid", {"query": "Which port does the ledger listen on?"}),
    ("memory Recall", "hostile: 3,999 letters + NUL (within maxLength)", {"query": "a" * 3999 + "\0"}),
    ("model turn", "plain, valid", {"messages": [user("How long should your answers be?")]}),
    (
        "model turn",
        "hostile: 7 messages of 31,999 letters + NUL (within maxLength)",
        {"messages": [user("a" * 31_999 + "\0")] * 7},
    ),
    ("model turn", "hostile: 250,000 letters + NUL (over maxLength)", {"messages": [user("a" * 250_000 + "\0")]}),
]
SCHEMAS = {
    "memory CreateEntry": memory_schemas.CREATE,
    "memory Recall": memory_schemas.RECALL,
    "model turn": model_schemas.TURN,
}


def former(schema: dict) -> dict:
    """The schema as the doors had it: the former not-blank pattern wherever the current one stands."""
    text = json.dumps(schema).replace(json.dumps(memory_schemas.NOT_BLANK), json.dumps(FORMER_NOT_BLANK))
    return json.loads(text)


def timed(function, runs: int) -> dict:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(statistics.median(times), 3), "max_ms": round(max(times), 3), "runs": runs}


def check(schema: Schema, body: dict) -> int:
    try:
        schema.check(body)
        return 200
    except ProblemError as error:
        return error.status


def bare(runs: int) -> list[dict]:
    compiled = {name: Schema(schema) for name, schema in SCHEMAS.items()}
    rows = []
    for name, what, body in BODIES:
        status = check(compiled[name], body)
        rows.append(
            {
                "schema": name,
                "body": what,
                "outcome": 422 if status == 422 else "valid",
                **timed(lambda s=compiled[name], b=body: check(s, b), runs),
            }
        )
    return rows


def former_validator(include: bool) -> dict:
    out: dict = {"bodies": [], "pattern_alone": []}
    if not include:
        return out
    for length in (1000, 2000, 4000, 8000):
        text = "a" * length + "\0"
        out["pattern_alone"].append({"characters": length + 1, **timed(lambda t=text: re.search(FORMER_NOT_BLANK, t), 1)})
    for name, what, body in BODIES:
        if not what.startswith("hostile") or "250,000" in what or "7 messages" in what:
            continue  # minutes each: the pattern alone shows the growth
        validator = Draft202012Validator(former(SCHEMAS[name]))
        out["bodies"].append({"schema": name, "body": what, **timed(lambda v=validator, b=body: list(v.iter_errors(b)), 1)})
    return out


def door(runs: int, root: Path) -> list[dict]:
    pg = Postgres(root / "data")
    pg.start()
    server = issuer_served = None
    try:
        issuer, issuer_served = dev_issuer(root / "issuer")
        env = {
            "AGENTFN_JWT_ISSUER": issuer.url,
            "AGENTFN_JWKS_URL": issuer.jwks_url,
            "AGENTFN_LOG_LEVEL": "WARNING",
            **subject_hash_key(root),
            "AGENTFN_DATABASE_URL": pg.provision("memory", "agentfn_memory"),
            "AGENTFN_MEMORY_WRITES_PER_MINUTE": "1000000",
        }  # a benchmark, not a person
        server = Gunicorn("agentfn.memory.app:create_app()", env, root / "memory.log")
        server.start()
        session = requests.Session()
        session.headers.update(
            {"Authorization": f"Bearer {issuer.caller_token('bench-validation')}", "Content-Type": "application/json"}
        )
        rows = []
        for name, what, body in BODIES:
            if name != "memory CreateEntry":
                continue
            # A valid body is a new note each time (the same note again is answered from the existing entry).
            numbered = itertools.count()

            def post(b=body, valid=what == "plain, valid", numbered=numbered):
                sent = {**b, "text": f"{b['text']} (note {next(numbered)})"} if valid else b
                return session.post(server.url + "/v1/entries", data=json.dumps(sent).encode(), timeout=120)

            status = post().status_code  # warm
            rows.append(
                {
                    "door": "POST /v1/entries",
                    "body": what,
                    "status": status,
                    "bytes": len(json.dumps(body)),
                    **timed(post, runs),
                }
            )
        return rows
    finally:
        if server:
            server.stop()
        if issuer_served:
            issuer_served.stop()
        pg.stop("immediate")


def markdown(out: dict) -> str:
    lines = [
        f"# Validation: a hostile-pattern body against a plain one ({out['when']})",
        "",
        f"`{out['command']}` on {out['machine']} at the start.",
        "",
        "## Bare: `shared.validation.Schema.check`",
        "",
        "| schema | body | outcome | p50 ms | max ms |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r['schema']} | {r['body']} | {r['outcome']} | {r['p50_ms']} | {r['max_ms']} |" for r in out["bare"]]
    lines += [
        "",
        "## Through memory's door: `POST /v1/entries` under gunicorn",
        "",
        "| body | status | bytes | p50 ms | max ms |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r['body']} | {r['status']} | {r['bytes']} | {r['p50_ms']} | {r['max_ms']} |" for r in out["door"]]
    if out["former"]["bodies"]:
        lines += [
            "",
            "## The former validator (quadratic pattern, tried over maxLength), once each",
            "",
            "| schema | body | ms |",
            "|---|---|---|",
        ]
        lines += [f"| {r['schema']} | {r['body']} | {r['p50_ms']} |" for r in out["former"]["bodies"]]
        lines += [
            "",
            "The former pattern alone on letters ending in NUL (quadratic: twice the text, four times the time):",
            "",
            "| characters | ms |",
            "|---|---|",
        ]
        lines += [f"| {r['characters']} | {r['p50_ms']} |" for r in out["former"]["pattern_alone"]]
    f = out["figures"]
    lines += [
        "",
        "## Figures",
        "",
        f"- through the door, the hostile 60 KB body vs a plain refused one: {f['door_hostile_ms']} ms vs "
        f"{f['door_plain_refused_ms']} ms (p50)",
        f"- bare, the worst hostile body vs a plain valid one: {f['bare_worst_hostile_ms']} ms vs "
        f"{f['bare_plain_ms']} ms (p50)",
    ]
    if f.get("former_hostile_s") is not None:
        lines.append(f"- the former validator on the same 60 KB hostile body: {f['former_hostile_s']} s")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-former", action="store_true", help="skip the former validator (about 40 s)")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    out = {
        "when": when(),
        "command": command(),
        "machine": machine(),
    }
    print("bare ...", flush=True)
    out["bare"] = bare(args.runs)
    print("former validator ...", flush=True)
    out["former"] = former_validator(not args.no_former)
    print("through the door ...", flush=True)
    root = postgres_dir()  # outside pytest's tree: the server runs as its own system user
    try:
        out["door"] = door(args.runs, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    by_body = {r["body"]: r for r in out["door"]}
    hostile_60k = "hostile: 60,000 letters + NUL (over maxLength)"
    former_60k = next((r["p50_ms"] for r in out["former"]["bodies"] if r["body"] == hostile_60k), None)
    out["figures"] = {
        "door_hostile_ms": by_body[hostile_60k]["p50_ms"],
        "door_plain_refused_ms": by_body["plain, refused (blank text)"]["p50_ms"],
        "bare_worst_hostile_ms": max(r["p50_ms"] for r in out["bare"] if r["body"].startswith("hostile")),
        "bare_plain_ms": max(r["p50_ms"] for r in out["bare"] if r["body"] == "plain, valid"),
        "former_hostile_s": round(former_60k / 1000, 1) if former_60k is not None else None,
    }
    write("validation", out, markdown(out))
    print(markdown(out))


if __name__ == "__main__":
    main()
