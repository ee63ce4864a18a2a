"""Real parts for every test: embedded Postgres, the dev issuer on loopback, functions under gunicorn."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests
from werkzeug.serving import make_server

from agentfn.cli.postgres import EmbeddedPostgres, free_port
from agentfn.shared import db
from agentfn.shared.dev_issuer import DevIssuer
from agentfn.shared.dev_issuer import create_app as issuer_app

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MODEL_SERVICE = "system:serviceaccount:agentfn:model"


class Postgres(EmbeddedPostgres):
    """The test server, plus the parts' roles it provisioned."""

    def provision(self, schema: str, role: str) -> str:
        password = secrets.token_urlsafe(16)
        db.provision(self.admin_dsn, schema=schema, role=role, password=password)
        return self.dsn(role, password)


def postgres_dir() -> Path:
    """Outside pytest's private temp tree: the server runs as its own system user and must reach it."""
    path = Path(tempfile.mkdtemp(prefix="agentfn-pg-"))
    path.chmod(0o711)
    return path


@pytest.fixture(scope="session")
def postgres():
    root = postgres_dir()
    pg = Postgres(root / "data")
    pg.start()
    yield pg
    pg.stop("immediate")
    shutil.rmtree(root, ignore_errors=True)


class Issuer(DevIssuer):
    def env(self) -> dict[str, str]:
        return {"AGENTFN_JWT_ISSUER": self.url, "AGENTFN_JWKS_URL": self.jwks_url,
                "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": MODEL_SERVICE}

    def headers(self, subject: str, groups: list[str] | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.caller_token(subject, groups)}"}


@pytest.fixture(scope="session")
def issuer(tmp_path_factory):
    port = free_port()
    issuer = Issuer(tmp_path_factory.mktemp("issuer"), f"http://127.0.0.1:{port}")
    server = make_server("127.0.0.1", port, issuer_app(issuer), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield issuer
    server.shutdown()


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
            env=self.env, stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT,
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


@pytest.fixture(scope="session")
def memory_env(postgres, issuer):
    return {**issuer.env(), "AGENTFN_DATABASE_URL": postgres.provision("memory", "agentfn_memory"),
            "AGENTFN_LOG_LEVEL": "INFO"}


@pytest.fixture(scope="session")
def memory(memory_env, tmp_path_factory):
    """The memory function under gunicorn, on the real database, with the default (multilingual) model."""
    server = Gunicorn("agentfn.memory.app:create_app()", memory_env, tmp_path_factory.mktemp("logs") / "memory.log")
    server.start()
    yield server
    server.stop()


class Client:
    """A caller of one function: requests with a caller token for one subject."""

    def __init__(self, base: str, headers: dict[str, str]):
        self.base, self.session = base, requests.Session()
        self.session.headers.update(headers)

    def __getattr__(self, method):
        return lambda path, **kw: self.session.request(method.upper(), self.base + path, timeout=30, **kw)


@pytest.fixture
def caller(memory, issuer):
    """A fresh subject each test, so tests never see each other's entries."""
    return Client(memory.url, issuer.headers(f"user-{secrets.token_hex(4)}"))
