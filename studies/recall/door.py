"""Through the door: the shipped recall setting checked on the product as built.

    .venv/bin/python studies/recall/study.py --door

One embedded Postgres and the dev issuer on loopback; memory under gunicorn with the default model; the corpus'
notes kept for a fresh subject through POST /v1/entries (episodes through POST /internal/v1/episodes, as the
model function's service account), every question asked through POST /v1/recall. The figures per part and group
stand beside the study's prediction for the shipped setting (results.json "shipped"), and every question the
product answered with another set of notes than the study predicted is listed.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]  # the study beside it

import study  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

from agentfn.devstack.harness.identity import subject_hash_key  # noqa: E402
from agentfn.devstack.harness.ports import free_port  # noqa: E402
from agentfn.devstack.harness.postgres import Postgres, postgres_dir  # noqa: E402
from agentfn.devstack.harness.servers import Client, Gunicorn  # noqa: E402
from agentfn.devstack.issuer import DevIssuer  # noqa: E402
from agentfn.devstack.issuer import create_app as issuer_app  # noqa: E402

TRUSTED = "system:serviceaccount:agentfn:model"


@contextmanager
def stack():
    """Embedded Postgres + the dev issuer (as tests/conftest.py starts them); all stopped and deleted after."""
    root, scratch = postgres_dir(), Path(tempfile.mkdtemp(prefix="agentfn-door-"))
    pg, server = Postgres(root / "data"), None
    try:
        pg.start()
        port = free_port()
        issuer = DevIssuer(scratch / "issuer", f"http://127.0.0.1:{port}")
        server = make_server("127.0.0.1", port, issuer_app(issuer), threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = {
            "AGENTFN_JWT_ISSUER": issuer.url,
            "AGENTFN_JWKS_URL": issuer.jwks_url,
            "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": TRUSTED,
            **subject_hash_key(scratch),
            "AGENTFN_LOG_LEVEL": "WARNING",
            "AGENTFN_MEMORY_WRITES_PER_MINUTE": "1000",  # the corpus is kept in one go
            "AGENTFN_DATABASE_URL": pg.provision("memory", "agentfn_memory"),
        }
        yield issuer, env, scratch
    finally:
        if server:
            server.shutdown()
            server.server_close()
        pg.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def ask(issuer, env, scratch, corpus: study.Corpus) -> dict:
    """Keep the notes and ask every question through memory's doors: what each recall showed, and timings."""
    server = Gunicorn(
        "agentfn.memory.app:create_app()", {**env, "AGENTFN_EMBEDDING_MODEL": study.MODEL}, scratch / "memory.log"
    )
    subject = f"study-{secrets.token_hex(4)}"
    try:
        boot = server.start(timeout=180)
        client = Client(server.url, {"Authorization": f"Bearer {issuer.caller_token(subject)}"})
        service = Client(server.url, {"Authorization": f"Bearer {issuer.service_token(TRUSTED)}"})
        index = {}
        for i, note in enumerate(corpus.notes):
            if note["kind"] == "episode":
                r = service.post("/internal/v1/episodes", json={"subject": subject, "text": note["text"]})
            else:
                r = client.post("/v1/entries", json={"kind": note["kind"], "text": note["text"], "source": "study"})
            r.raise_for_status()
            index[r.json()["id"]] = i
        shown, latency = np.full((len(corpus.questions), study.TOP_K), -1), []
        for qi, q in enumerate(corpus.questions):
            t0 = time.perf_counter()
            r = client.post("/v1/recall", json={"query": q["text"]})
            latency.append(1000 * (time.perf_counter() - t0))
            r.raise_for_status()
            for k, e in enumerate(r.json()["entries"]):
                shown[qi, k] = index[e["id"]]
            threshold = r.json()["threshold"]
    finally:
        server.stop()
    return dict(shown=shown, latency=np.array(latency), boot=boot, threshold=threshold)


def section(door: dict) -> str:
    lat = door["latency_ms"]
    lines = [
        "## Through the door (the product as built)",
        "",
        f"`{study.MODEL}` as shipped (floor {door['threshold']:g}; {study.changes_text(door['changes'])}), through the "
        "product itself: embedded Postgres, "
        f"the dev issuer, memory under gunicorn on loopback; the {door['notes']} notes kept for one subject through "
        "`POST /v1/entries` (episodes through `POST /internal/v1/episodes`), each question asked through `POST "
        f"/v1/recall`. Recall over HTTP p50 {lat['p50']:.0f} ms, p90 {lat['p90']:.0f} ms (one client). "
        "`.venv/bin/python studies/recall/study.py --door`.",
        "",
        "| part | questions | right: door / study | others per q: door / study | no-answer q shown notes: door / study |",
        "|---|---|---|---|---|",
    ]
    for part in ("tuning", "held-out"):
        for g in ("en", "hr", "xlang", "all"):
            d, p = door["door"][part][g], door["study"][part][g]
            lines.append(
                f"| {part} | {g} ({d['answerable']}) | "
                f"{study.fmt(d['right'], True)} / {study.fmt(p['right'], True)} "
                f"| {study.fmt(d['others'])} / {study.fmt(p['others'])} | "
                f"{study.fmt(d['no_answer_shown'], True)} / {study.fmt(p['no_answer_shown'], True)} |"
            )
    differ = door["questions shown differently"]
    lines += [
        "",
        f"Questions answered with another set of notes than the study predicted: {len(differ)}"
        + (
            ": "
            + "; ".join(
                f"{d['question']} (door {', '.join(d['door']) or '-'}, study {', '.join(d['study']) or '-'})" for d in differ
            )
            if differ
            else ""
        )
        + ".",
        "",
    ]
    return "\n".join(lines) + "\n"


def run(out: Path, corpus_path: Path, cache: Path | None = None) -> dict:
    start, corpus = time.time(), study.Corpus(corpus_path)
    machine = json.loads((out / "results.json").read_text(encoding="utf-8"))
    setting = study.from_json(machine["shipped"]["setting"])
    recall = study.Recall(corpus, study.similarities(corpus, cache), study.text_view(corpus))
    predicted = recall.shown(setting)
    with stack() as (issuer, env, scratch):
        asked = ask(issuer, env, scratch, corpus)
    ids = [n["id"] for n in corpus.notes]
    differ = [
        {
            "question": q["id"],
            "door": [ids[j] for j in asked["shown"][qi] if j >= 0],
            "study": [ids[j] for j in predicted[qi] if j >= 0],
        }
        for qi, q in enumerate(corpus.questions)
        if set(asked["shown"][qi][asked["shown"][qi] >= 0]) != set(predicted[qi][predicted[qi] >= 0])
    ]
    lat = asked["latency"]
    door = {
        "setting": machine["shipped"]["setting"],
        "changes": machine["shipped"]["changes"],
        "threshold": asked["threshold"],
        "notes": len(corpus.notes),
        "door": {p: study.figures(asked["shown"], corpus, m) for p, m in corpus.parts.items()},
        "study": {p: study.figures(predicted, corpus, m) for p, m in corpus.parts.items()},
        "questions shown differently": differ,
        "boot_s": round(asked["boot"], 1),
        "latency_ms": {"p50": float(np.percentile(lat, 50)), "p90": float(np.percentile(lat, 90))},
        "seconds": round(time.time() - start),
    }
    machine["door"] = door
    (out / "results.json").write_text(json.dumps(machine, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    md = out / "results.md"
    text = md.read_text(encoding="utf-8").split("## Through the door")[0].rstrip()
    md.write_text(text + "\n\n" + section(door), encoding="utf-8")
    print(section(door))
    return door
