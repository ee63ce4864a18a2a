"""Benchmark of the page fetcher: `open_page` against a plain `requests.get` + `trafilatura.extract`.

    .venv/bin/python benchmarks/bench_page.py [--small N] [--large N] [--starts N]    (as root, or with sudo)

The guard refuses loopback, so the page server cannot stand on the host's loopback: the test lab
(agentfn.devstack.harness.page_lab) makes a network namespace with a "public" server at 44.0.0.10 and a DNS server,
and this script re-runs itself inside it, where it also starts an embedded Postgres, the dev token
issuer and the page fetcher under gunicorn. Each round fetches the same page both ways, side by side
(alternating, a fresh query string each time so the page fetcher's cache never answers), at 10 KB
and 1 MB. A fourth call of each round goes to the floor (`floor_app`): a bare WSGI callable under the same
gunicorn settings that fetches the literal URL with urllib3 and extracts it with trafilatura, nothing else, so
the cost of the HTTP hop alone is measured beside the door's. It also measures the page fetcher's start under
gunicorn: to ready, and to the answer of a first page asked for as soon as it is ready; and the imports of
`agentfn.page.app` (`-X importtime`).

Writes benchmarks/results/page.json and benchmarks/results/page.md.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import ROOT, command, cpu_seconds, machine, when, write

from agentfn.devstack.harness import page_lab
from agentfn.devstack.harness.identity import dev_issuer, subject_hash_key

BIN = Path(sys.executable).parent
SIZES = {"10 KB": 10_000, "1 MB": 1_000_000}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=201, help="rounds at 10 KB")
    parser.add_argument("--large", type=int, default=15, help="rounds at 1 MB")
    parser.add_argument("--starts", type=int, default=5, help="cold starts measured")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        return inside(args)
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark makes a network namespace")
    directory = Path(tempfile.mkdtemp(prefix="agentfn-bench-page-"))
    lab, pid = page_lab.launch(directory)
    try:
        command = [
            "nsenter",
            f"--net=/proc/{pid}/ns/net",
            "--",
            sys.executable,
            __file__,
            "--inside",
            "--small",
            str(args.small),
            "--large",
            str(args.large),
            "--starts",
            str(args.starts),
        ]
        subprocess.run(command, check=True)
    finally:
        lab.stdin.close()
        lab.terminate()
        lab.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


def inside(args) -> None:
    """Everything in the lab's namespace: Postgres, the issuer, the page fetcher, both clients."""
    import requests
    import trafilatura

    from agentfn.cli.postgres import EmbeddedPostgres
    from agentfn.shared import db

    work = Path(tempfile.mkdtemp(prefix="agentfn-bench-pg-"))
    work.chmod(0o711)
    postgres = EmbeddedPostgres(work / "data")
    postgres.start()
    servers = []
    try:
        password = secrets.token_urlsafe(16)
        db.provision(postgres.admin_dsn, schema="page", role="agentfn_page", password=password)
        issuer, _ = dev_issuer(work / "issuer")  # served until the process ends
        # Raw forwarding: the caller's own token at the door (the exchange's cost is bench_identity.py's measure).
        env = {
            **os.environ,
            "AGENTFN_JWT_ISSUER": issuer.url,
            "AGENTFN_JWKS_URL": issuer.jwks_url,
            "AGENTFN_TOKEN_FORWARDING": "raw",
            **subject_hash_key(work),
            "AGENTFN_DATABASE_URL": postgres.dsn("agentfn_page", password),
            "AGENTFN_DNS_SERVERS": "127.0.0.1:53",
            "AGENTFN_PAGE_DAILY_PAGES": "1000000",
            "AGENTFN_LOG_LEVEL": "WARNING",
            "AGENTFN_BIND": "127.0.0.1",
        }

        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {issuer.caller_token('bench', ttl=3600 * 4)}"

        starts, firsts, cpus = [], [], []
        for _ in range(args.starts):
            server = Server(env, work / "page.log")
            servers.append(server)  # before it starts: stopped in `finally` even if it never gets ready
            ready, first = server.start(session)
            starts.append(ready)
            firsts.append(first)
            cpus.append(server.ready_cpu)
            if len(servers) > 1:
                servers.pop(0).stop()
        server = servers[-1]
        floor = Server(env, work / "floor.log", app="bench_page:floor_app()")
        servers.append(floor)
        floor.start(None)

        def open_page(url: str) -> float:
            started = time.perf_counter()
            response = session.post(server.url + "/v1/open", json={"url": url}, timeout=60)
            elapsed = time.perf_counter() - started
            assert response.status_code == 200, response.text
            return elapsed

        def bare(url: str) -> float:
            started = time.perf_counter()
            response = session.post(floor.url, json={"url": url}, timeout=60)
            elapsed = time.perf_counter() - started
            assert response.status_code == 200, response.text
            return elapsed

        def plain(url: str) -> float:
            started = time.perf_counter()
            text = trafilatura.extract(requests.get(url, timeout=60).text)
            elapsed = time.perf_counter() - started
            assert text
            return elapsed

        results, shuffle = {}, random.Random(7)
        load_before = os.getloadavg()[0]
        for label, size in SIZES.items():
            rounds = args.small if size < 100_000 else args.large
            ours, by_name, base, floors = [], [], [], []
            for i in range(rounds + 1):  # round 0 warms every path (imports, DNS cache, connections)
                token = secrets.token_hex(4)
                literal = f"http://44.0.0.10/bench/{size}?r={token}"
                calls = [
                    (ours, open_page, literal),
                    (by_name, open_page, f"http://www.pub.test/bench/{size}?r={token}"),
                    (base, plain, literal),
                    (floors, bare, f"{literal}&floor"),
                ]
                shuffle.shuffle(calls)  # no order effect between the four
                for store, call, url in calls:
                    elapsed = call(url)
                    if i:
                        store.append(elapsed)
            results[label] = {
                "rounds": rounds,
                "open_page_p50_ms": round(statistics.median(ours) * 1000, 2),
                "open_page_by_name_p50_ms": round(statistics.median(by_name) * 1000, 2),
                "requests_trafilatura_p50_ms": round(statistics.median(base) * 1000, 2),
                "ratio": round(statistics.median(ours) / statistics.median(base), 3),
                "ratio_by_name": round(statistics.median(by_name) / statistics.median(base), 3),
                "floor_p50_ms": round(statistics.median(floors) * 1000, 2),
                "floor_ratio": round(statistics.median(floors) / statistics.median(base), 3),
            }
        # Where the door's own time goes: a window of a cached page (token check, HTTP, JSON only), with the token
        # of every call above (remembered once verified, as a turn's calls send one token) and with a token not seen
        # before (its signature checked); and a refused literal address (that, plus the budget statement and the
        # audit row, no connection).
        cached_url = "http://44.0.0.10/bench/10000?r=cached"
        open_page(cached_url)

        def new_token_window() -> float:
            # The same caller (so the same cached page), another token string (ES256 signatures are randomised).
            token = issuer.caller_token("bench", ttl=600)  # minted outside the timing
            started = time.perf_counter()
            response = session.post(
                server.url + "/v1/open", json={"url": cached_url}, headers={"Authorization": f"Bearer {token}"}, timeout=60
            )
            elapsed = time.perf_counter() - started
            assert response.status_code == 200, response.text
            return elapsed

        overhead = {
            "cached_window_p50_ms": _p50([open_page(cached_url) for _ in range(args.small)]),
            "cached_window_new_token_p50_ms": _p50([new_token_window() for _ in range(args.small)]),
            "refused_p50_ms": _p50([_refused(session, server.url) for _ in range(args.small)]),
        }
        report = {
            "benchmark": "page fetcher: open_page vs requests.get + trafilatura.extract",
            "command": command(["--small", str(args.small), "--large", str(args.large), "--starts", str(args.starts)]),
            "when": when(),
            "machine": f"{machine()} at the end, {load_before:.1f} at the start (the cores are shared)",
            "pages": results,
            "door_overhead": overhead,
            "start_to_ready_s": {
                "p50": round(statistics.median(starts), 3),
                "min": round(min(starts), 3),
                "max": round(max(starts), 3),
                "starts": len(starts),
            },
            "cpu_to_ready_s": {"p50": round(statistics.median(cpus), 3), "min": round(min(cpus), 3)},
            "start_to_first_answer_s": {
                "p50": round(statistics.median(firsts), 3),
                "min": round(min(firsts), 3),
                "max": round(max(firsts), 3),
                "starts": len(firsts),
            },
            "import_time": import_time(),
            "goals": {"ratio": 1.2, "start_to_ready_s": 1.0},
        }
        write("page", report, markdown(report))
        print(markdown(report))
    finally:
        for server in servers:
            server.stop()
        postgres.stop("immediate")
        shutil.rmtree(work, ignore_errors=True)


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no server outlives the benchmark


def _p50(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


def import_time(runs: int = 3, top: int = 5) -> dict:
    """`python -X importtime -c 'import agentfn.page.app'`: each module's best cumulative time over a few runs."""
    best: dict[str, int] = {}
    for _ in range(runs):
        err = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import agentfn.page.app"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        ).stderr
        for line in err.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            _, cumulative, name = line.removeprefix("import time:").split("|")
            best[name.strip()] = min(best.get(name.strip(), 1 << 62), int(cumulative))
    ranked = sorted(best.items(), key=lambda item: -item[1])[:top]
    return {"runs": runs, "top_cumulative_ms": {name: round(us / 1000, 1) for name, us in ranked}}


def _refused(session, base: str) -> float:
    started = time.perf_counter()
    response = session.post(base + "/v1/open", json={"url": "http://127.0.0.1/"}, timeout=60)
    assert response.status_code == 403
    return time.perf_counter() - started


class Server:
    """The page fetcher (or the floor, `app`) under gunicorn on the namespace's loopback."""

    def __init__(self, env: dict[str, str], log: Path, app: str = "agentfn.page.app:create_app()"):
        from agentfn.devstack.harness.ports import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env, self.log, self.app = {**env, "PORT": str(self.port)}, log, app
        if app.startswith("bench_page:"):
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), env.get("PYTHONPATH")]))
        self.process: subprocess.Popen | None = None
        self.ready_cpu = 0.0

    def start(self, session) -> tuple[float, float]:
        """Seconds from the process's start to `/readyz` 200, and to the answer of a first page asked for then
        (no page without a `session`)."""
        import requests

        started = time.monotonic()
        self.process = subprocess.Popen(
            [str(BIN / "gunicorn"), "-c", "python:agentfn.shared.gunicorn_conf", self.app],
            env=self.env,
            cwd=ROOT,
            stdout=open(self.log, "ab"),
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        while time.monotonic() - started < 60:
            try:
                if requests.get(self.url + "/readyz", timeout=2).status_code == 200:
                    ready = time.monotonic() - started
                    self.ready_cpu = cpu_seconds(self.process.pid)
                    if session is None:
                        return ready, ready
                    url = f"http://44.0.0.10/bench/10000?first={secrets.token_hex(4)}"
                    answer = session.post(self.url + "/v1/open", json={"url": url}, timeout=60)
                    assert answer.status_code == 200, answer.text
                    return ready, time.monotonic() - started
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.01)
        raise RuntimeError(f"the page fetcher did not get ready; see {self.log}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)


def floor_app():
    """The floor: what any door under gunicorn costs at least. A bare WSGI callable (no Flask, no token, no budget,
    no guard, no link numbering) that fetches the literal URL it is sent with urllib3, as the page fetcher does
    (a new connection, `Connection: close`), extracts it as the baseline does, and answers the text as JSON."""
    import trafilatura
    from urllib3.connection import HTTPConnection

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/readyz":
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        url = json.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))["url"]
        host, _, target = url.removeprefix("http://").partition("/")
        conn = HTTPConnection(host, 80, timeout=60)
        try:
            conn.request("GET", "/" + target, headers={"Connection": "close"})
            html = conn.getresponse().data.decode()
        finally:
            conn.close()
        body = json.dumps({"text": trafilatura.extract(html) or ""}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return app


def markdown(report: dict) -> str:
    rows = [
        f"| {label} | {r['rounds']} | {r['open_page_p50_ms']} | {r['open_page_by_name_p50_ms']} | "
        f"{r['requests_trafilatura_p50_ms']} | {r['ratio']}x | {r['ratio_by_name']}x | {r['floor_p50_ms']} | "
        f"{r['floor_ratio']}x |"
        for label, r in report["pages"].items()
    ]
    s, f = report["start_to_ready_s"], report["start_to_first_answer_s"]
    small = report["pages"]["10 KB"]["requests_trafilatura_p50_ms"]
    door_share = round(100 * report["door_overhead"]["cached_window_p50_ms"] / small)
    imports = report["import_time"]
    return "\n".join(
        [
            "# Page fetcher benchmark",
            "",
            f"`{report['command']}` ({report['when']}, {report['machine']})",
            "",
            "p50 of one call, side by side in one run; goal <= 1.2x. `open_page` is the whole door (caller JWT, budget,",
            "DNS, guarded fetch, extraction with numbered links, audit, JSON) through gunicorn; the baseline is",
            "`trafilatura.extract(requests.get(url).text)` of the same page. Fresh query string each round (no cache),",
            "the four calls of a round (these three and the floor) in random order. One caller token for every call,",
            "as a turn's calls send one: verified in full once, then remembered until its `exp`.",
            "",
            "The floor is a bare WSGI callable under the same gunicorn settings that fetches the same URL with urllib3 and",
            "extracts it as the baseline does, nothing else (no Flask, token, budget, guard or link numbering): what the",
            "HTTP hop to any door costs.",
            "",
            "| page | rounds | open_page ms (IP URL) | open_page ms (by name) | requests + trafilatura ms | ratio | "
            "ratio by name | floor ms | floor ratio |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Door overhead, p50: a window of a cached page {report['door_overhead']['cached_window_p50_ms']} ms "
            f"(a token already verified, HTTP, JSON), {report['door_overhead']['cached_window_new_token_p50_ms']} ms "
            f"with a token not seen before (its signature checked); a refused address "
            f"{report['door_overhead']['refused_p50_ms']} ms (the first, "
            f"plus the budget statement; the audit row is queued and written off the response path). The cached "
            f"window alone is {door_share}% of the 10 KB baseline, where the goal leaves 20% for the whole door.",
            "",
            f"Start-to-ready under gunicorn (process start to `/readyz` 200, migrations applied): p50 {s['p50']} s, "
            f"min {s['min']} s, max {s['max']} s over {s['starts']} starts; goal <= 1 s. CPU time (user + system, master "
            f"and worker) to ready: p50 {report['cpu_to_ready_s']['p50']} s, min {report['cpu_to_ready_s']['min']} s "
            "(less sensitive to the shared cores' load than the wall-clock time).",
            "",
            f"Start to the answer of a first 10 KB page, asked for as soon as `/readyz` answered 200: p50 {f['p50']} s, "
            f"min {f['min']} s, max {f['max']} s.",
            "",
            f"`python -X importtime -c 'import agentfn.page.app'`, the five largest cumulative times (ms, best of "
            f"{imports['runs']} runs, the same load):",
            "",
            "| module | cumulative ms |",
            "|---|---|",
            *[f"| `{name}` | {ms} |" for name, ms in imports["top_cumulative_ms"].items()],
            "",
        ]
    )


if __name__ == "__main__":
    main()
