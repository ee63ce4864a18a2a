"""What the benchmarks share: where results go and how each says what it ran and on what, the figures' summaries, and
what it costs a server to start. The parts and servers they start come from the harness the tests use too
(agentfn.devstack.harness); nothing here imports from tests/.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

# --- what a result says of its run ----------------------------------------------------------------------


def command(args: list[str] | None = None) -> str:
    """The command that made a result, runnable from the repository's root: the running benchmark with `args`
    (its own arguments unless given, e.g. with a local folder replaced by a placeholder)."""
    script = Path(sys.argv[0]).resolve().relative_to(ROOT)
    return shlex.join([".venv/bin/python", str(script), *(sys.argv[1:] if args is None else args)])


def machine() -> str:
    """The machine a run measured on: its cores and their load (other work shares them) weigh on every figure."""
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}"
    )


def when() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def write(name: str, results: dict, markdown: str, into: Path = RESULTS) -> None:
    """`name`.json (the figures) and `name`.md (what a reader reads) in the results folder."""
    into.mkdir(parents=True, exist_ok=True)
    (into / f"{name}.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    (into / f"{name}.md").write_text(markdown)


# --- summaries ------------------------------------------------------------------------------------------


def p50(values) -> float:
    return round(statistics.median(values), 2)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile: a value measured, not one interpolated between two."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --- servers --------------------------------------------------------------------------------------------


def cpu_seconds(master: int) -> float:
    """utime + stime of a gunicorn master and its workers (and, once reaped, their children): what a start costs on
    an idle core, whatever the load of the moment."""
    tick = os.sysconf("SC_CLK_TCK")
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    total = 0
    for pid in [master, *map(int, children)]:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / tick
