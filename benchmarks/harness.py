"""What the benchmarks share: where results go and how each says what it ran and on what, the figures' summaries, and
the servers several of them start (the dev issuer, the scripted engine, the local platform).

Importing it puts tests/ on the path: the benchmarks start the parts with the tests' own helpers (`support`).
"""

from __future__ import annotations

import datetime
import io
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests

from agentfn.cli.postgres import free_port
from agentfn.devstack.issuer import DevIssuer
from agentfn.devstack.issuer import create_app as issuer_app

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "tests"))
from support import Gunicorn, Served  # noqa: E402

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


def wait_http(url: str, timeout: float = 30) -> None:
    """Until `url` answers at all (a server without /readyz)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


def dev_issuer(directory: Path) -> tuple[DevIssuer, Served]:
    """The dev issuer in this process: what mints the callers' tokens and serves the keys that verify them."""
    port = free_port()
    issuer = DevIssuer(directory, f"http://127.0.0.1:{port}")
    return issuer, Served(issuer_app(issuer), port)


class IssuerServer(Gunicorn):
    """The dev issuer under gunicorn, as `agentfn up` runs it (its token endpoint is measured), with `issuer` on the
    same key directory to mint what the served one would take."""

    def __init__(self, directory: Path, env: dict[str, str], log: Path):
        super().__init__("agentfn.devstack.issuer:create_app()", env, log)
        self.env |= {"AGENTFN_JWT_ISSUER": self.url, "AGENTFN_DEV_ISSUER_DIR": str(directory)}
        self.issuer = DevIssuer(directory, self.url)

    def wait_ready(self, timeout: float = 60) -> None:
        wait_http(self.url + "/healthz", timeout)  # no /readyz of its own


class ScriptedEngine:
    """The tests' scripted engine (a test double of an LLM) in a process of its own, so that it shares no
    interpreter with what is measured."""

    # argv[1]: the port; argv[2]: the folder of the tests' support package.
    MAIN = """
import sys
from werkzeug.serving import make_server
sys.path.insert(0, sys.argv[2])
from support.scripted_engine import create_app
make_server("127.0.0.1", int(sys.argv[1]), create_app(), threaded=True).serve_forever()
"""

    def __init__(self):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-c", self.MAIN, str(port), str(ROOT / "tests")], stderr=subprocess.DEVNULL
        )
        wait_http(self.url + "/v1/models")

    def script(self, *rounds: dict) -> str:
        """A script's id: `script:<id>` in a person's message has the engine play these rounds."""
        return requests.post(self.url + "/scripts", json={"rounds": list(rounds)}, timeout=5).json()["id"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def local_platform(var: Path, **options):
    """The local platform (`agentfn up` as a library) in `var`, its progress lines kept off the benchmark's output."""
    from rich.console import Console

    from agentfn.cli.stack import Stack

    return Stack(var, Console(file=io.StringIO()), **options)
