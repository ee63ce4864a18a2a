"""A part served on loopback: under gunicorn as in a cluster (`Gunicorn`), a WSGI app in this process (`Served`, a read
tool's `dev_upstream`), or a server of the dev stack in a process of its own (`IssuerServer`,
`ScriptedEngineProcess`); a caller of one (`Client`); and what a benchmark or a study started, stopped at its end
(`Started`)."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
from werkzeug.serving import make_server

from agentfn.devstack.issuer import DevIssuer

from .ports import free_port
from .postgres import Postgres, postgres_dir

ROOT = Path(__file__).resolve().parents[5]  # the repository: devstack/src/agentfn/devstack/harness/ is five below it
BIN = Path(sys.executable).parent
# Each read tool and the setting naming the platform service behind it (its dev upstream here).
READ_TOOLS = {
    "platform_status": "AGENTFN_PLATFORM_STATUS_UPSTREAM_URL",
    "list_models": "AGENTFN_LIST_MODELS_UPSTREAM_URL",
    "radar_latest": "AGENTFN_RADAR_LATEST_UPSTREAM_URL",
}


class Gunicorn:
    """A function served by gunicorn on a loopback port, as in a cluster."""

    def __init__(self, app: str, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env, "PORT": str(self.port), "AGENTFN_BIND": "127.0.0.1"}
        self.app, self.log = app, log
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> float:
        started = time.monotonic()
        self._out = open(self.log, "ab")
        self.process = subprocess.Popen(
            [str(BIN / "gunicorn"), "-c", "python:agentfn.shared.gunicorn_conf", self.app],
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.wait_ready(timeout)
        return time.monotonic() - started

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.app} exited; see {self.log}:\n{self.log.read_text()[-3000:]}")
            try:
                if requests.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.app} not ready in {timeout}s; see {self.log}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)
        self._out.close()


class Served:
    """A WSGI app on a loopback port in this process (the scripted engine, the dev upstreams, a function built by
    its factory)."""

    def __init__(self, app, port: int | None = None):
        self.app, self.port = app, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = make_server("127.0.0.1", self.port, app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def controls(self):
        """A dev upstream's controls: the faults a test asks for, the tokens it received."""
        return self.app.extensions["agentfn.dev_upstream"]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def dev_upstream(tool: str, env: dict) -> Served:
    """A read tool's dev upstream (a test double of the platform service behind it), on loopback in this process."""
    return Served(importlib.import_module(f"agentfn.devstack.{tool}").create_app(env))


class Client:
    """A caller of one function: requests with a caller token for one subject."""

    def __init__(self, base: str, headers: dict[str, str]):
        self.base, self.session = base, requests.Session()
        self.session.headers.update(headers)

    def __getattr__(self, method):
        return lambda path, **kw: self.session.request(method.upper(), self.base + path, timeout=30, **kw)


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


class IssuerServer(Gunicorn):
    """The dev issuer under gunicorn, as `agentfn up` runs it, with `issuer` on the same key directory to mint what the
    served one would take."""

    def __init__(self, directory: Path, env: dict[str, str], log: Path):
        super().__init__("agentfn.devstack.issuer:create_app()", env, log)
        self.env |= {"AGENTFN_JWT_ISSUER": self.url, "AGENTFN_DEV_ISSUER_DIR": str(directory)}
        self.issuer = DevIssuer(directory, self.url)

    def wait_ready(self, timeout: float = 60) -> None:
        wait_http(self.url + "/healthz", timeout)  # no /readyz of its own


class ScriptedEngineProcess:
    """The scripted engine (a test double of an LLM) in a process of its own, so that it shares no interpreter with
    what a benchmark measures."""

    def __init__(self):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentfn.devstack.scripted_engine", "--port", str(port)], stderr=subprocess.DEVNULL
        )
        wait_http(self.url + "/v1/models")

    def script(self, *rounds: dict) -> str:
        """A script's id: `script:<id>` in a person's message has the engine play these rounds."""
        return requests.post(self.url + "/scripts", json={"rounds": list(rounds)}, timeout=5).json()["id"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


class Started:
    """What a benchmark or a study started, stopped in the reverse order at its end, its scratch folder (named from
    `prefix`) and its arguments."""

    prefix = "agentfn-"

    def __init__(self, args=None):
        self.args, self.started = args, []
        self.tmp = Path(tempfile.mkdtemp(prefix=self.prefix))

    def start(self, server: Gunicorn, timeout: float = 120) -> Gunicorn:
        server.start(timeout)
        return self.keep(server)

    def keep(self, running):
        """Anything with a `stop()`: stopped at the end."""
        self.started.append(running)
        return running

    def postgres(self) -> Postgres:
        """Embedded Postgres in a folder of its own, deleted at the end."""
        pg = Postgres(postgres_dir() / "data")
        pg.start()
        self.keep(Scratch(pg))
        return pg

    def up(self) -> None:
        """What a subclass starts; `with` calls it, and `down` at the end whatever happened."""

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def down(self) -> None:
        for running in reversed(self.started):
            running.stop()
        self.started.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Scratch:
    """A run's database: stopped at once at the end, and its folder deleted."""

    def __init__(self, pg: Postgres):
        self.pg = pg

    def stop(self) -> None:
        self.pg.stop("immediate")
        shutil.rmtree(self.pg.data_dir.parent, ignore_errors=True)
