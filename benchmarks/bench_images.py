"""Benchmark: the platform from its images against the same platform on processes, side by side.

Not a test; run by hand as root after `./dev images` (2 cores, loopback only, about five minutes):

    .venv/bin/python benchmarks/bench_images.py [--rounds 5] [--platform-rounds 3]

1. each image's size: the whole image and what this project adds over its base (podman's own figures);
2. each function's start to its first answer (the first HTTP answer of GET /healthz, polled every 10 ms) and to
   ready (GET /readyz 200), as a container of its image under the chart's settings against the same function as a
   process, restarted one at a time inside a running platform, alternating which goes first in each round;
3. the whole platform's start, `agentfn up` against `agentfn up --images` (each with its own data folder, as a
   second start is: Postgres is initialised once), alternating, to the banner.
The engine is the scripted one from the tests (a test double of an LLM; no model loads), so the figures are the
platform's own. It writes benchmarks/results/images.json and images.md, then stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path
from statistics import median

import requests
from report import command, when, write

from agentfn.cli import images
from agentfn.cli.parts import Part
from agentfn.cli.pods import container_name
from agentfn.cli.readiness import is_ready
from agentfn.cli.stack import Stack
from agentfn.devstack.harness.local_platform import local_platform
from agentfn.devstack.harness.servers import Served
from agentfn.devstack.scripted_engine import create_app as engine_app


def sizes() -> dict[str, dict[str, float]]:
    base = next(b for b in (images.PUBLIC_BASE, images.STAND_IN) if images.exists(b))
    under = images.size(base)
    whole = {part: images.size(images.image(part)) for part in images.IMAGES}
    return {part: {"mib": size / 2**20, "added_mib": (size - under) / 2**20} for part, size in whole.items()} | {
        "base": {"mib": under / 2**20, "added_mib": 0.0, "name": base}
    }


def stop(stack: Stack, part: Part) -> None:
    if part.process and part.process.poll() is None:
        os.killpg(part.process.pid, signal.SIGTERM)
        part.process.wait(30)
    images.remove([container_name(part)])


def answered(url: str) -> bool:
    try:
        requests.get(url + "/healthz", timeout=1)
        return True
    except requests.RequestException:
        return False


def start(stack: Stack, part: Part, container: bool) -> tuple[float, float]:
    """(seconds to the first answer, seconds to ready) of one part launched as a container or a process."""
    stop(stack, part)
    stack.images = container
    began = time.monotonic()
    stack.launch(part)
    first = None
    while not is_ready(part):
        if first is None and answered(part.url):
            first = time.monotonic() - began
        if part.process.poll() is not None:
            raise SystemExit(f"{part.name} exited; see {stack.var.log_of(part)}")
        if time.monotonic() - began > 120:
            raise SystemExit(f"{part.name} not ready in 120 s; see {stack.var.log_of(part)}")
        time.sleep(0.01)
    ready = time.monotonic() - began
    return (first if first is not None else ready), ready


def parts_starts(var: Path, rounds: int) -> dict[str, dict[str, list[float]]]:
    stack = local_platform(var, images=True)
    times: dict[str, dict[str, list[float]]] = {}
    try:
        stack.up()
        served = [p for p in stack.parts if p.name in images.FUNCTIONS]
        for n in range(rounds):
            for part in served:
                for container in (True, False) if n % 2 else (False, True):
                    first, ready = start(stack, part, container)
                    mode = "container" if container else "process"
                    record = times.setdefault(part.name, {})
                    record.setdefault(f"{mode}_first", []).append(first)
                    record.setdefault(f"{mode}_ready", []).append(ready)
            print(f"round {n + 1} of {rounds}: each function restarted both ways", flush=True)
    finally:
        stack.images = True
        stack.down()
    return times


def platform_starts(home: Path, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"processes": [], "containers": []}
    for n in range(rounds):
        for container in (True, False) if n % 2 else (False, True):
            mode = "containers" if container else "processes"
            stack = local_platform(home / mode, images=container)
            began = time.monotonic()
            try:
                stack.up()
                times[mode].append(time.monotonic() - began)
            finally:
                stack.down()
        print(f"round {n + 1} of {rounds}: the platform started both ways", flush=True)
    return times


def report(found: dict) -> str:
    lines = [
        f"# The platform from its images ({found['when']})",
        "",
        f"Command: `{found['command']}`; base image `{found['sizes']['base']['name']}` "
        f"({found['sizes']['base']['mib']:.0f} MiB). Medians of {found['rounds']} starts each, alternating.",
        "",
        "| part | image, MiB | over the base, MiB | process: first answer / ready, s | container: first answer / ready, s "
        "| ready, container / process |",
        "|---|---|---|---|---|---|",
    ]
    for part in images.IMAGES:
        size = found["sizes"][part]
        row = [part, f"{size['mib']:.0f}", f"{size['added_mib']:.0f}"]
        starts = found["parts"].get(part)
        if starts:
            p = (median(starts["process_first"]), median(starts["process_ready"]))
            c = (median(starts["container_first"]), median(starts["container_ready"]))
            row += [f"{p[0]:.2f} / {p[1]:.2f}", f"{c[0]:.2f} / {c[1]:.2f}", f"{c[1] / p[1]:.2f}x"]
        else:
            row += ["–", "–", "–"]  # the operator's local mode serves no door
        lines.append("| " + " | ".join(row) + " |")
    platform = found["platform"]
    lines += [
        "",
        f"The whole platform to its banner: processes **{median(platform['processes']):.1f} s**, containers "
        f"**{median(platform['containers']):.1f} s** (medians of {len(platform['processes'])}; "
        f"all: {', '.join(f'{t:.1f}' for t in platform['processes'])} / "
        f"{', '.join(f'{t:.1f}' for t in platform['containers'])}).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="starts of each function each way")
    parser.add_argument("--platform-rounds", type=int, default=3, help="starts of the whole platform each way")
    args = parser.parse_args()
    images.check_built()
    engine = Served(engine_app())
    os.environ |= {
        "AGENTFN_TIERS": "fast",
        "AGENTFN_TIER_FAST_URL": f"{engine.url}/v1",
        "AGENTFN_TIER_FAST_MODEL": "scripted",
        "AGENTFN_TIER_FAST_TOOL_MODE": "native",
    }
    with tempfile.TemporaryDirectory(prefix="agentfn-bench-images-") as work:
        home = Path(work)
        home.chmod(0o755)  # Postgres runs as its own user
        found = {
            "when": when(),
            "command": command(),
            "rounds": args.rounds,
            "sizes": sizes(),
            "parts": parts_starts(home / "parts", args.rounds),
            "platform": platform_starts(home, args.platform_rounds),
        }
    engine.stop()
    write("images", found, report(found))
    print(report(found))


if __name__ == "__main__":
    main()
