"""Benchmark: what the question's terms cost the recall statement, the shipped prefix lengths against earlier ones.

    .venv/bin/python benchmarks/bench_recall_terms.py [--entries 10000] [--rounds 6]

Not a test; run by hand. bench_memory.py measures recall through the door, where one change to the terms is a
millisecond among the embedding's thirty and the machine's other load moves every figure more than that. This
measures the statement alone, A against B in alternating rounds in one process: embedded Postgres in a fresh /tmp
directory with memory's migrations, one subject of --entries entries (the recall study's first 80 notes and
bench_memory's filler texts, random unit vectors), store.RECALL_HYBRID run for each of the study's first 182
questions with the terms cut as shipped (terms.parameters: English 6 letters, Croatian 4) and as before (5 for
both). Prints p50 / p90 per side and how many entries the text list matches per question.
"""

from __future__ import annotations

import argparse
import shutil
import time
import uuid

import bench_memory
import numpy as np
import psycopg

from agentfn.devstack.harness.postgres import Postgres, postgres_dir
from agentfn.memory import terms
from agentfn.memory.embedder import DEFAULT_MODEL, model_config
from agentfn.memory.store import DEPTH, QUESTION_TERMS, RECALL_HYBRID, RRF_K, Store

CUT = model_config(DEFAULT_MODEL)  # the vector list's gap and first-shown-alone, as shipped
SIDES = {"before (5 and 5 letters)": {"en": 5, "hr": 5}, "shipped": {lang: r["stem"] for lang, r in terms.RULES.items()}}


def term_parameters(question: str, stems: dict) -> dict:
    return {**terms.parameters(question), "stem": stems[terms.language(question)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    root = postgres_dir()
    pg = Postgres(root / "data")
    try:
        pg.start()
        store = Store(pg.provision("memory", "agentfn_memory"), pool_size=1)
        store.migrate()
        texts = ([t for _, t in bench_memory.NOTES] + bench_memory.filler_texts(rng, args.entries))[: args.entries]
        vectors = rng.normal(size=(args.entries + len(bench_memory.QUERIES), 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:  # the admin bypasses RLS
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO memory.entries (id, subject, kind, text, source, model, embedding) "
                    "VALUES (%s, 'bench', 'fact', %s, 'bench', 'bench', %s::halfvec)",
                    [
                        (uuid.uuid4(), t, "[" + ",".join(f"{x:.4f}" for x in v) + "]")
                        for t, v in zip(texts, vectors, strict=False)
                    ],
                )
            conn.execute("VACUUM ANALYZE memory.entries")
        queries = vectors[args.entries :]

        def recall(i: int, stems: dict) -> list:
            question = bench_memory.QUERIES[i]
            params = dict(
                subject="bench",
                question=question,
                query=queries[i],
                model="bench",
                threshold=0.82,
                limit=5,
                kinds=None,
                k=RRF_K,
                depth=DEPTH,
                gap=CUT.gap,
                vector_alone=CUT.vector_alone,
                **term_parameters(question, stems),
            )
            with store.subject("bench") as cur:
                return cur.execute(RECALL_HYBRID, params).fetchall()

        times = {side: [] for side in SIDES}
        for r in range(args.rounds):
            for side in list(SIDES) if r % 2 == 0 else list(SIDES)[::-1]:
                for i in range(len(bench_memory.QUERIES)):
                    started = time.perf_counter()
                    recall(i, SIDES[side])
                    times[side].append(time.perf_counter() - started)
        with store.subject("bench") as cur:
            for side, stems in SIDES.items():
                count = f"SELECT count(*) FROM entries WHERE subject = 'bench' AND terms @@ ({QUESTION_TERMS})"
                matched = [
                    cur.execute(count, dict(question=q, **term_parameters(q, stems))).fetchone()["count"]
                    for q in bench_memory.QUERIES
                ]
                ms = 1000 * np.array(times[side])
                print(
                    f"{side:26} p50 {np.percentile(ms, 50):6.2f} ms  p90 {np.percentile(ms, 90):6.2f} ms  "
                    f"({len(ms)} recalls; text list matches {np.mean(matched):.1f} entries per question)"
                )
        store.close()
    finally:
        pg.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
