"""What tests of every part share: a function under gunicorn on loopback, a WSGI app in this process, and a
caller of them.

On the path through pytest's `pythonpath`: `from support import Gunicorn, Client`. The modules of this package
hold each part's own helpers (`support.model`, `support.tools`, ...) and the test doubles of what lies outside
the project (`support.scripted_engine`); fixtures stay in the conftest files.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
from werkzeug.serving import make_server

from agentfn.cli.postgres import EmbeddedPostgres, free_port
from agentfn.devstack.issuer import CALLER_AUDIENCE, JWT_BEARER, TOKEN_EXCHANGE, TOKEN_TYPES, DevIssuer, ExchangeClient
from agentfn.devstack.sign_in import WebClient
from agentfn.shared import db
from agentfn.shared.contract import audience

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"
# Each read tool and the setting naming its upstream (a dev upstream in the tests).
READ_TOOLS = {
    "platform_status": "AGENTFN_PLATFORM_STATUS_UPSTREAM_URL",
    "list_models": "AGENTFN_LIST_MODELS_UPSTREAM_URL",
    "radar_latest": "AGENTFN_RADAR_LATEST_UPSTREAM_URL",
}
TOOLS = (*READ_TOOLS, "run_code")
# Tool functions of another team whose descriptors offer them alone and over MCP and do not say they are reads
# (support.model.stateful_tool): what the model function must never let be called alone.
STATEFUL_TOOLS = {"close_incident": {"changes_state": True}, "page_oncall": {}}
MCP_RESOURCE = "https://agentfn.test/mcp"  # /mcp's resource URL in the tests (AGENTFN_MCP_RESOURCE)
WORKBENCH = "agentfn-workbench"  # the workbench's client at the issuer: a browser app at the site root
WORKBENCH_URL = "https://agentfn.test/"
CHROMIUM = Path(os.environ.get("AGENTFN_TEST_CHROMIUM", "/usr/bin/chromium"))  # Debian's, which .ci/run installs


def account(part: str) -> str:
    """A part's service account, as the chart and the dev stack name it."""
    return f"system:serviceaccount:agentfn:agentfn-{part.replace('_', '-')}"


def exchange_clients() -> dict[str, ExchangeClient]:
    """What the issuer lets each workload exchange, as the dev stack configures it."""
    clients = {
        MODEL_SERVICE: ExchangeClient(
            frozenset({"agentfn", MCP_RESOURCE}),
            frozenset({audience("memory"), audience("page"), *(audience("tool", t) for t in (*TOOLS, *STATEFUL_TOOLS))}),
        )
    }
    for tool in READ_TOOLS:
        clients[account(tool)] = ExchangeClient(frozenset({audience("tool", tool)}), frozenset({audience("upstream", tool)}))
    return clients


def web_clients() -> dict[str, WebClient]:
    """The public clients people sign in with, as the dev stack configures the workbench."""
    return {WORKBENCH: WebClient(WORKBENCH, frozenset({WORKBENCH_URL}), CALLER_AUDIENCE)}


def subject_hash_key(directory: str | Path) -> dict[str, str]:
    """The setting of the deployment's key of subject_hash, its file made once in `directory` (as the chart's Secret
    or `agentfn up`'s var/secrets/subject-hash/key holds it): every part that takes callers needs it to start."""
    path = Path(directory) / "subject-hash-key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return {"AGENTFN_SUBJECT_HASH_KEY_FILE": str(path)}


class Issuer(DevIssuer):
    """The dev issuer as the tests serve it, with the settings and tokens each part's tests ask of it."""

    def __init__(self, directory, *args, **kwargs):
        super().__init__(directory, *args, **kwargs)
        self.subject_hash_key_file = Path(subject_hash_key(directory)["AGENTFN_SUBJECT_HASH_KEY_FILE"])

    def env(self) -> dict[str, str]:
        """A part's identity settings: the model function trusted at WriteEpisode and as the actor of exchanges, and
        the key of the pseudonym the logs and traces name callers by."""
        return {
            "AGENTFN_JWT_ISSUER": self.url,
            "AGENTFN_JWKS_URL": self.jwks_url,
            "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": MODEL_SERVICE,
            "AGENTFN_TRUSTED_ACTORS": MODEL_SERVICE,
            "AGENTFN_SUBJECT_HASH_KEY_FILE": str(self.subject_hash_key_file),
        }

    def subject_hash(self, subject: str) -> str:
        """The pseudonym the parts log for `subject`: HMAC-SHA256 keyed by the deployment's key, 48 bits in hex."""
        key = self.subject_hash_key_file.read_bytes().strip()
        return hmac.new(key, subject.encode(), hashlib.sha256).hexdigest()[:12]

    def upstream_env(self, tool: str) -> dict[str, str]:
        """A dev upstream's: it trusts its read tool as the actor."""
        return {**self.env(), "AGENTFN_TRUSTED_ACTORS": account(tool)}

    def headers(self, subject: str, groups: list[str] | None = None) -> dict[str, str]:
        """The gateway's caller token (audience agentfn): memory's and the model function's doors."""
        return {"Authorization": f"Bearer {self.caller_token(subject, groups)}"}

    def assertion_file(self, directory, part: str):
        """A part's workload token for the issuer (what a projected token with the issuer's audience is)."""
        path = directory / f"exchange-token-{part}"
        path.write_text(self.service_token(account(part), audience=self.url))
        return path

    def exchanged(
        self,
        audience: str,
        subject: str,
        groups: list[str] | None = None,
        *,
        actor: str = MODEL_SERVICE,
        token: str | None = None,
    ) -> str:
        """A real exchange at the issuer's token endpoint, as `actor` does it, of the caller's gateway token
        (or `token`) for `audience`."""
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": token or self.caller_token(subject, groups),
            "subject_token_type": TOKEN_TYPES[0],
            "audience": audience,
            "client_assertion_type": JWT_BEARER,
            "client_assertion": self.service_token(actor, audience=self.url),
        }
        answer = requests.post(self.token_endpoint, data=form, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()["access_token"]

    def tool_headers(self, tool: str, subject: str, groups: list[str] | None = None) -> dict[str, str]:
        """What the model function sends a tool function (or the page fetcher, `tool="page"`) for the caller."""
        part = audience("page") if tool == "page" else audience("tool", tool)
        return {"Authorization": f"Bearer {self.exchanged(part, subject, groups)}"}


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


class Client:
    """A caller of one function: requests with a caller token for one subject."""

    def __init__(self, base: str, headers: dict[str, str]):
        self.base, self.session = base, requests.Session()
        self.session.headers.update(headers)

    def __getattr__(self, method):
        return lambda path, **kw: self.session.request(method.upper(), self.base + path, timeout=30, **kw)


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


def openapi_schema(url: str):
    """A function's own /openapi.json for schemathesis. Each test sends every case with a real token of its own, so
    the bearer scheme is left out of generation: a case is never "invalid" only for a token it is not sent with."""
    import schemathesis

    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    schema.config.generation.update(with_security_parameters=False)
    return schema
