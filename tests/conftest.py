"""Real parts for every test: embedded Postgres, the dev issuer on loopback, functions under gunicorn."""

from __future__ import annotations

import secrets
import shutil
import threading

import pytest
from agentfn.cli.postgres import free_port
from agentfn.shared.dev_issuer import DevIssuer
from agentfn.shared.dev_issuer import create_app as issuer_app
from support import Client, Gunicorn, Postgres, postgres_dir
from werkzeug.serving import make_server

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"


@pytest.fixture(scope="session")
def apiserver():
    """One real kube-apiserver (and etcd) on loopback for the session, for every folder that needs one
    (tests/apiserver.py; the binary is built once per machine)."""
    from apiserver import KubeAPI, build

    api = KubeAPI()
    try:
        api.start(build())
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="session")
def postgres():
    root = postgres_dir()
    pg = Postgres(root / "data")
    pg.start()
    yield pg
    pg.stop("immediate")
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def model_dsn(postgres) -> str:
    """The model function's role and schema, provisioned once a session (again would change its password)."""
    return postgres.provision("model", "agentfn_model")


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


@pytest.fixture
def caller(memory, issuer):
    """A fresh subject each test, so tests never see each other's entries."""
    return Client(memory.url, issuer.headers(f"user-{secrets.token_hex(4)}"))
