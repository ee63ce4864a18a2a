"""Benchmark: the tool functions' cold start, and run_code's sandbox against bare python3, side by side.

Not a test; run by hand (2 cores, loopback only, about a minute):

    .venv/bin/python benchmarks/bench_tools.py [--starts 7] [--runs 40] [--bytecode compiled|none] [--against REV]

It runs the dev issuer and the three dev upstreams (test doubles of the platform services) on loopback
ports, embedded Postgres in a fresh /tmp directory (run_code's schema and role provisioned), then:
1. start-to-ready: each tool under gunicorn (1 worker, as deployed), process start to the first 200 from
   /readyz (polled every 5 ms), median and min of --starts cold starts taken in rounds (every function
   once per round, beside two baselines: bare Flask and the shared skeleton with no doors); the CPU time
   used until ready; and start-to-first-answer, process start to the first 200 from POST /v1/call (what
   a user's turn waits for on a cold start); with `--bytecode compiled` (the default) every module runs from
   bytecode, as in a function's image (pip compiles it at install), kept in a fresh PYTHONPYCACHEPREFIX and
   written by one untimed start of each function first; `none` runs as the environment is (this dev venv has
   no bytecode and PYTHONDONTWRITEBYTECODE=1 set: every start compiles flask, werkzeug and the rest again);
   and the `-X importtime` profile of each function's start (its app imported and built, as the worker does;
   the other parts' apps imported only) and of gunicorn's master, in the same mode: its five heaviest
   imports by cumulative time, each not nested in another listed, and the own modules' time; with --against,
   the tools as they are at that git revision too, started in the same rounds and profiled alike;
2. sandbox overhead: a hello-world program run by the bubblewrap backend (in this process, warmed once)
   against bare `python3 -I -c` of the same program with the same interpreter, alternating in rounds so
   that other load on the machine hits both alike: p50/p90, the ratio and the added milliseconds; the
   same program through run_code's door (HTTP, token check, the daily-runs count, the sandbox); and the
   runsc backend where runsc is installed (fewer rounds: it takes about half a second a run); each with
   the run bound the machine allows (`bounds`: a cgroup per run, or the process limit in the run's own user
   namespace and its memory sampled);
3. the sampled memory bound's overshoot: four children writing 8 MB chunks as fast as they can, each chunk
   reported on stdout, under a per-run memory of 256 MB: how much the run held when it was stopped.
It writes benchmarks/results/tools.json and tools.md, then stops everything it started.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import requests
from report import ROOT, command, cpu_seconds, machine, percentile, when, write

from agentfn.devstack.harness.identity import dev_issuer, subject_hash_key
from agentfn.devstack.harness.postgres import Postgres, postgres_dir
from agentfn.devstack.harness.servers import READ_TOOLS, Gunicorn, dev_upstream
from agentfn.run_code.bounds import Bounds
from agentfn.run_code.bubblewrap import Bubblewrap
from agentfn.run_code.limits import RunLimits
from agentfn.run_code.rootfs import LazyRoot, default_python
from agentfn.run_code.sandbox import Uids
from agentfn.run_code.settings import SandboxSettings

HELLO = "print('hello, world')"
GROUPS = ["platform-users"]
GOAL_START_S, GOAL_ADDED_MS = 0.5, 150
OTHER_PARTS = ["model", "memory", "page", "workbench"]  # import profiles only: their start is others' measure
MASTER = "import gunicorn.app.wsgiapp, gunicorn.workers.gthread, agentfn.shared.gunicorn_conf"
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)$")


class ColdStart(Gunicorn):
    """gunicorn as in the tests, but polled finely: the figure is the start, not the poll interval. It also
    reads the CPU time master and worker had used when ready: what a start costs on an idle core."""

    def __init__(self, app: str, env: dict, log: Path, ready_status: int = 200):
        super().__init__(app, env, log)
        self.ready_status, self.cpu_to_ready = ready_status, None

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.app} exited; see {self.log}")
            try:
                if requests.get(self.url + "/readyz", timeout=2).status_code == self.ready_status:
                    self.cpu_to_ready = cpu_seconds(self.process.pid)
                    return
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.005)
        raise RuntimeError(f"{self.app} not ready in {timeout}s")


def stats_ms(values: list[float]) -> dict:
    ordered = sorted(v * 1000 for v in values)
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(percentile(ordered, 0.9), 1),
        "min_ms": round(ordered[0], 1),
        "n": len(ordered),
    }


def cold_start(app: str, env: dict, logs: Path, first_call=None, ready_status: int = 200) -> tuple:
    server = ColdStart(app, env, logs / f"start-{time.monotonic_ns()}.log", ready_status)
    started = time.monotonic()
    try:
        ready = server.start()
        answered = None
        if first_call:
            response = first_call(server.url)
            answered = time.monotonic() - started
            assert response.status_code == 200, response.text
        return ready, server.cpu_to_ready, answered
    finally:
        server.stop()


def cold_starts(functions: dict[str, tuple], logs: Path, n: int) -> dict:
    """n rounds, each starting every function once in turn, so that other load hits them all alike; one untimed
    round first (it writes the bytecode, when the mode keeps it). Besides the medians, each function's start
    against the first one's (bare Flask) in the same round, the median of those differences: the load of the
    moment, shared by both, mostly cancels out."""
    for app, env, first_call, ready_status in functions.values():
        cold_start(app, env, logs, first_call, ready_status)
    seen = {name: [] for name in functions}
    for _ in range(n):
        for name, (app, env, first_call, ready_status) in functions.items():
            seen[name].append(cold_start(app, env, logs, first_call, ready_status))
            time.sleep(0.2)
    baseline = next(iter(seen.values()))
    figures = {}
    for name, runs in seen.items():
        ready, cpu, answered = zip(*runs, strict=True)
        figures[name] = {
            "start_to_ready_s": round(statistics.median(ready), 3),
            "start_to_ready_min_s": round(min(ready), 3),
            "over_baseline_s": round(statistics.median(r[0] - b[0] for r, b in zip(runs, baseline, strict=True)), 3),
            "cpu_to_ready_s": round(statistics.median(cpu), 3),
            "cpu_over_baseline_s": round(statistics.median(r[1] - b[1] for r, b in zip(runs, baseline, strict=True)), 3),
            "starts": n,
        }
        if answered[0] is not None:
            figures[name]["start_to_first_answer_s"] = round(statistics.median(answered), 3)
            figures[name]["first_call_s"] = round(statistics.median(a - r for a, r in zip(answered, ready, strict=True)), 3)
    return figures


def import_profile(code: str, env: dict, runs: int = 3) -> dict:
    """`python -X importtime -c code`: the total, the five heaviest imports by cumulative time (not agentfn's own,
    none nested in another listed: flask is listed, not werkzeug under it) and the own modules' self time. Run
    twice, the second measured: the first writes the bytecode, when the mode keeps it."""
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
    rows = [(int(m[1]), int(m[2]), len(m[3]) // 2, m[4]) for m in map(IMPORT_LINE.match, out.stderr.splitlines()) if m]
    # importtime writes a module after the ones it imported, indented one level deeper: its parent is the next
    # line one level up.
    parent: list[int | None] = []
    for i, (_, _, depth, _) in enumerate(rows):
        parent.append(next((j for j in range(i + 1, len(rows)) if rows[j][2] < depth), None))

    def ancestors(i: int):
        while (i := parent[i]) is not None:
            yield i

    chosen: list[int] = []
    for i in sorted(range(len(rows)), key=lambda i: -rows[i][1]):
        if len(chosen) == 5:
            break
        if not rows[i][3].startswith("agentfn") and not any(a in chosen for a in ancestors(i)):
            chosen.append(i)
    return {
        "total_ms": round(sum(r[0] for r in rows) / 1000, 1),
        "top": [[rows[i][3], round(rows[i][1] / 1000, 1)] for i in chosen],
        "own_ms": round(sum(r[0] for r in rows if r[3].startswith("agentfn")) / 1000, 1),
    }


def import_profiles(starts: dict[str, tuple], bytecode: dict, then: dict | None, rev: str | None) -> dict:
    """Each tool's start (its module imported, its app built) with its own settings, the other parts' modules,
    and gunicorn's master (its modules and the shared conf); the other parts' also at `rev` (`then`)."""
    profiles = {"gunicorn master": import_profile(MASTER, bytecode)}
    for name, (app, env, _, _) in starts.items():
        if not name.startswith("baseline"):
            module, _, factory = app.partition(":")
            profiles[name] = import_profile(f"import {module} as m; m.{factory}", {**env, **bytecode})
    for part in OTHER_PARTS:
        profiles[part] = import_profile(f"import agentfn.{part}.app", bytecode)
        if then:
            profiles[f"{part} @ {rev}"] = import_profile(f"import agentfn.{part}.app", {**bytecode, **then})
    return profiles


def sandbox_overhead(backend, python: str, rounds: int, door=None) -> dict:
    bare, sandboxed, through_door = [], [], []
    backend.run(HELLO)  # warm: the root's discovery, page cache
    for _ in range(rounds):
        t = time.monotonic()
        out = subprocess.run([python, "-I", "-c", HELLO], capture_output=True, env={}, check=True)
        bare.append(time.monotonic() - t)
        assert out.stdout == b"hello, world\n"
        t = time.monotonic()
        result = backend.run(HELLO)
        sandboxed.append(time.monotonic() - t)
        assert result.stdout == "hello, world\n", result
        if door:
            t = time.monotonic()
            assert door().status_code == 200
            through_door.append(time.monotonic() - t)
        time.sleep(0.02)
    b, s = stats_ms(bare), stats_ms(sandboxed)
    figures = {
        "bare_python": b,
        "sandboxed": s,
        "ratio": round(s["p50_ms"] / b["p50_ms"], 2),
        "added_ms": round(s["p50_ms"] - b["p50_ms"], 1),
    }
    if through_door:
        figures["through_the_door"] = stats_ms(through_door)
    return figures


GREEDY = """
import os, sys
for _ in range(4):
    if os.fork() == 0:
        break
hoard = []
while True:
    hoard.append(b"x" * (8 << 20))
    os.write(1, b"+")
"""


def memory_overshoot(backend, rounds: int) -> dict:
    """MB held (as reported chunk by chunk) when the run was stopped, against the run's bound."""
    held = []
    for _ in range(rounds):
        result = backend.run(GREEDY)
        assert result.limit == "memory", result
        held.append(result.stdout.count("+") * 8)
    return {
        "bound_mb": backend.limits.memory_bytes >> 20,
        "held_mb_max": max(held),
        "held_mb_median": statistics.median(held),
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=7)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--bytecode", choices=("compiled", "none"), default="compiled")
    parser.add_argument(
        "--against",
        metavar="REV",
        help="also start the tools as they are at this git revision, in the same rounds (a change's before and after)",
    )
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the dev upstreams' request lines
    work = postgres_dir()
    logs = work / "logs"
    logs.mkdir()
    # An empty PYTHONDONTWRITEBYTECODE lets Python write bytecode again (the prefix keeps it out of the tree).
    bytecode = {"PYTHONPYCACHEPREFIX": str(work / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}
    bytecode = bytecode if args.bytecode == "compiled" else {}
    issuer, issuer_served = dev_issuer(work / "issuer")
    # Raw forwarding: the caller's own token at the door (the exchange's cost is bench_identity.py's measure).
    identity = {
        "AGENTFN_JWT_ISSUER": issuer.url,
        "AGENTFN_JWKS_URL": issuer.jwks_url,
        "AGENTFN_LOG_LEVEL": "WARNING",
        "AGENTFN_TOKEN_FORWARDING": "raw",
        **subject_hash_key(work),
    }
    headers = {"Authorization": f"Bearer {issuer.caller_token('bench', GROUPS)}"}
    upstreams = {t: dev_upstream(t, identity) for t in READ_TOOLS}
    pg = Postgres(work / "pg")
    pg.start()
    try:
        run_env = {
            **identity,
            "AGENTFN_DATABASE_URL": pg.provision("run_code", "agentfn_run_code"),
            "AGENTFN_RUN_CODE_DAILY_RUNS": "100000",
            "AGENTFN_WORKERS": "1",
        }

        def caller(arguments):
            return lambda url: requests.post(url + "/v1/call", json={"arguments": arguments}, headers=headers, timeout=30)

        # Baselines under the same gunicorn settings: bare Flask (ready = any answer), and the shared skeleton
        # with no doors (what every agentfn function pays: Flask, PyJWT, the app factory).
        one = {"AGENTFN_WORKERS": "1", **bytecode}
        functions = {
            "baseline: bare Flask": ("flask:Flask('baseline')", one, None, 404),
            "baseline: shared skeleton": (
                "agentfn.shared.app:create_app('agentfn.shared', openapi={}, readiness={}, identity=None)",
                one,
                None,
                200,
            ),
        }
        for tool, variable in READ_TOOLS.items():
            functions[tool] = (
                f"agentfn.{tool}.app:create_app()",
                {**identity, variable: upstreams[tool].url, **one},
                caller({}),
                200,
            )
        functions["run_code"] = ("agentfn.run_code.app:create_app()", {**run_env, **bytecode}, caller({"code": HELLO}), 200)
        if args.against:
            then = {"PYTHONPATH": str(tree_at(args.against, work / "against"))}
            for tool in [*READ_TOOLS, "run_code"]:
                app, env, first_call, ready_status = functions[tool]
                functions[f"{tool} @ {args.against}"] = (app, {**env, **then}, first_call, ready_status)
        starts = cold_starts(functions, logs, args.starts)
        for name, figures in starts.items():
            print(name, figures, flush=True)
        profiles = import_profiles(functions, bytecode, then if args.against else None, args.against)
        for name, profile in profiles.items():
            print(name, profile, flush=True)

        python = default_python()
        uids = Uids(3900000, 2) if os.geteuid() == 0 else None
        limits = RunLimits(memory_bytes=256 << 20, processes=16)
        bounds = Bounds("auto", limits)
        bubblewrap = Bubblewrap(SandboxSettings(), limits, LazyRoot(python), uids, bounds)
        door_server = ColdStart("agentfn.run_code.app:create_app()", run_env, logs / "run_code-door.log")
        door_server.start()
        session = requests.Session()
        session.headers.update(headers)
        try:

            def door():
                return session.post(door_server.url + "/v1/call", json={"arguments": {"code": HELLO}}, timeout=30)

            door()
            sandbox = {"bubblewrap": {**sandbox_overhead(bubblewrap, python, args.runs, door), "bounds": bounds.name}}
        finally:
            door_server.stop()
        print("bubblewrap", sandbox["bubblewrap"], flush=True)
        overshoot = memory_overshoot(bubblewrap, 10) if bounds.name == "rlimit" else "a cgroup per run: the kernel's bound"
        print("memory overshoot", overshoot, flush=True)
        if shutil.which("runsc") and os.geteuid() == 0:
            from agentfn.run_code.runsc import Runsc

            runsc_bounds = Bounds("off", limits)
            sandbox["runsc"] = {
                **sandbox_overhead(
                    Runsc(SandboxSettings(), limits, LazyRoot(python), None, runsc_bounds), python, max(5, args.runs // 8)
                ),
                "bounds": runsc_bounds.name,
            }
            print("runsc", sandbox["runsc"], flush=True)
        else:
            sandbox["runsc"] = "runsc is not installed on this machine"
    finally:
        pg.stop("immediate")
        for served in upstreams.values():
            served.stop()
        issuer_served.stop()
        shutil.rmtree(work, ignore_errors=True)

    report = {
        "when": when(),
        "machine": machine(),
        "kernel": platform.release(),
        "command": command(),
        "bytecode": args.bytecode,
        "against": args.against,
        "start": starts,
        "import_profiles": profiles,
        "sandbox": sandbox,
        "memory_overshoot": overshoot,
        "goals": {"start_to_ready_s": GOAL_START_S, "added_ms_bubblewrap": GOAL_ADDED_MS},
    }
    write("tools", report, markdown(report))
    print(markdown(report))


def against_markdown(r: dict) -> list[str]:
    """Each tool now beside itself at the --against revision, from the same rounds."""
    rev = r["against"]
    lines = [
        "",
        f"## At {rev} -> now, in the same rounds",
        "",
        "| function | start to ready (s) | over bare Flask (s) | CPU over bare Flask (s) | start to first answer (s) "
        "| first call (s) | import total (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, now in r["start"].items():
        then = r["start"].get(f"{name} @ {rev}")
        if then is None:
            continue

        def pair(key: str, signed: bool = False, then=then, now=now) -> str:
            return " -> ".join(f"{v:+}" if signed else str(v) for v in (then.get(key), now.get(key)))

        profiles = r["import_profiles"]
        lines.append(
            f"| {name} | {pair('start_to_ready_s')} | {pair('over_baseline_s', True)} | "
            f"{pair('cpu_over_baseline_s', True)} | {pair('start_to_first_answer_s')} | {pair('first_call_s')} | "
            f"{profiles[f'{name} @ {rev}']['total_ms']} -> {profiles[name]['total_ms']} |"
        )
    return lines


def tree_at(rev: str, into: Path) -> Path:
    """The agentfn package as it is at `rev` (shared, cli and every function), for PYTHONPATH: it is found
    before the editable install's mapping."""
    archive = subprocess.run(
        ["git", "archive", rev, "shared", "cli", "functions"], cwd=ROOT, capture_output=True, check=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into / "src", filter="data")
    package = into / "agentfn"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (into / "src" / "shared").rename(package / "shared")
    (into / "src" / "cli").rename(package / "cli")
    for folder in (into / "src" / "functions").iterdir():
        if folder.is_dir():
            folder.rename(package / folder.name)
    return into


BYTECODE = {
    "compiled": "bytecode compiled, as in a function's image",
    "none": "no bytecode: every start compiles the modules again",
}


def markdown(r: dict) -> str:
    ok = lambda good: "met" if good else "**missed**"  # noqa: E731
    lines = [
        "# Tools: cold start and sandbox overhead",
        "",
        f"Measured {r['when']} on {r['machine']} at the end (other work shares this machine), Linux {r['kernel']}, "
        f"with `{r['command']}`.",
        "",
        f"## Start under gunicorn (1 worker), median of cold starts ({BYTECODE[r['bytecode']]})",
        "",
        "| function | start to ready (s) | min (s) | over bare Flask (s) | CPU to ready (s) | CPU over bare Flask (s) "
        f"| start to first answer (s) | first call (s) | goal <= {GOAL_START_S} s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for tool, s in r["start"].items():
        goal = "" if tool.startswith("baseline") else ok(s["start_to_ready_s"] <= GOAL_START_S)
        lines.append(
            f"| {tool} | {s['start_to_ready_s']} | {s['start_to_ready_min_s']} | {s['over_baseline_s']:+} | "
            f"{s['cpu_to_ready_s']} | {s['cpu_over_baseline_s']:+} | {s.get('start_to_first_answer_s', '')} | "
            f"{s.get('first_call_s', '')} | {goal} |"
        )
    lines += [
        "",
        "CPU to ready: user + system time of gunicorn's master and worker (and their reaped children) when /readyz "
        "first answered; on an idle core start-to-ready is about this plus the waits (sockets, Postgres). Over bare "
        "Flask: the median, over the rounds, of the difference to bare Flask's start in the same round. First call: "
        "from ready to the first call's answer (the token's check, the body's schema, the work).",
        "",
        "## What a start imports: `-X importtime`, same bytecode mode",
        "",
        "The tools: the app's module imported and its app built with the settings above; the other parts: their app's "
        "module imported; gunicorn's master: its modules and the shared conf. The quickest of three runs: its five "
        "heaviest imports by cumulative time (ms), none nested in another listed nor agentfn's own (a module is "
        "counted where it is first imported: `logging` under agentfn's first import of it, though Flask would load it "
        "too); own: agentfn's modules' self time.",
        "",
        "| start | total (ms) | heaviest five, cumulative (ms) | own (ms) |",
        "|---|---|---|---|",
    ]
    for name, p in r["import_profiles"].items():
        top = ", ".join(f"{module} {ms}" for module, ms in p["top"])
        lines.append(f"| {name} | {p['total_ms']} | {top} | {p['own_ms']} |")
    if r.get("against"):
        lines += against_markdown(r)
    lines += [
        "",
        "## run_code: hello world, sandboxed against bare `python3 -I -c`, side by side",
        "",
        "| backend (run bound) | bare p50 (ms) | sandboxed p50 (ms) | sandboxed p90 (ms) | ratio | added (ms) "
        "| through the door p50 (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in r["sandbox"].items():
        if isinstance(s, str):
            lines.append(f"| {name} | {s} | | | | | |")
            continue
        door = s.get("through_the_door", {}).get("p50_ms", "")
        lines.append(
            f"| {name} ({s['bounds']}) | {s['bare_python']['p50_ms']} | {s['sandboxed']['p50_ms']} | "
            f"{s['sandboxed']['p90_ms']} | {s['ratio']} | {s['added_ms']} | {door} |"
        )
    b = r["sandbox"]["bubblewrap"]
    lines += [
        "",
        f"Goal: bubblewrap adds <= {GOAL_ADDED_MS} ms: {ok(b['added_ms'] <= GOAL_ADDED_MS)}. "
        '"Through the door" is POST /v1/call on a warm run_code (token check, the daily-runs count in '
        "Postgres, the sandbox, JSON).",
        "",
    ]
    o = r["memory_overshoot"]
    lines += ["## The sampled memory bound (no cgroup per run): what a greedy run held when stopped", ""]
    if isinstance(o, str):
        lines += [o, ""]
    else:
        lines += [
            f"Four children writing 8 MB chunks as fast as they can, per-run memory {o['bound_mb']} MB, "
            f"{o['rounds']} runs: held at most **{o['held_mb_max']} MB** (median {o['held_mb_median']} MB) "
            "when stopped, counted from the chunks each reported.",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
