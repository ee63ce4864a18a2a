"""The local platform: every part on this machine, as it runs in a cluster (each function under gunicorn).

`agentfn up` starts embedded Postgres (data kept in `var/`), the dev issuer and the functions, shows
progress, prints a banner when everything is ready and stops everything on Ctrl-C.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests
from agentfn.shared import db
from rich.console import Console

from .postgres import EmbeddedPostgres

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
PR_SET_PDEATHSIG = 1
SERVICE_ACCOUNT = "system:serviceaccount:agentfn:agentfn-model"
# One base port (the gateway's, later) and the parts above it: AGENTFN_DEV_PORT_BASE moves them all.
BASE = int(os.environ.get("AGENTFN_DEV_PORT_BASE", "8800"))
READS = ("platform_status", "list_models", "radar_latest")
PORTS = {"issuer": BASE + 1, "memory": BASE + 2, "page": BASE + 3,
         **{tool: BASE + 10 + n for n, tool in enumerate((*READS, "run_code"))},
         **{f"{tool}-upstream": BASE + 20 + n for n, tool in enumerate(READS)},
         "postgres": BASE + 99}
# Parts with a schema of their own: schema -> role.
ROLES = {"memory": "agentfn_memory", "page": "agentfn_page", "run_code": "agentfn_run_code"}


@dataclass
class Part:
    name: str
    app: str  # a gunicorn app spec, or for `argv` parts a label
    port: int | None
    env: dict[str, str] = field(default_factory=dict)
    ready: str = "/readyz"
    argv: list[str] | None = None  # a plain process instead of gunicorn
    ready_file: Path | None = None  # for plain processes: ready when this file exists
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


def die_with_parent() -> None:
    """In the child before exec: the kernel sends it SIGTERM if `agentfn up` itself dies (even by SIGKILL)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((HOST, port)) == 0


class Stack:
    def __init__(self, var: Path, console: Console):
        self.var = var.resolve()
        self.console = console
        self.postgres = EmbeddedPostgres(self.var / "postgres", port=PORTS["postgres"])
        self.parts: list[Part] = []

    def secret(self, name: str) -> str:
        """A password kept in var/secrets across restarts (so roles keep working with existing data)."""
        path = self.var / "secrets" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.write_text(secrets.token_urlsafe(24))
            path.chmod(0o600)
        return path.read_text().strip()

    def check_ports(self) -> None:
        taken = [f"{name} ({port})" for name, port in PORTS.items() if port_taken(port)]
        if taken:
            raise SystemExit(f"port already taken: {', '.join(taken)}. Is another `agentfn up` running?")

    def start_postgres(self) -> dict[str, str]:
        """Start Postgres and give each part with a schema its own role; returns each part's DSN."""
        dsns = {}
        with self.console.status("starting Postgres + pgvector (embedded)"):
            self.postgres.start()
            for schema, role in ROLES.items():
                password = self.secret(f"{schema}-db")
                db.provision(self.postgres.admin_dsn, schema=schema, role=role, password=password)
                dsns[schema] = self.postgres.dsn(role, password)
        self.console.print(f"[green]✓[/] Postgres on {HOST}:{self.postgres.port} (data in {self.postgres.data_dir})")
        return dsns

    def identity_env(self) -> dict[str, str]:
        issuer = f"http://{HOST}:{PORTS['issuer']}"
        return {"AGENTFN_JWT_ISSUER": issuer, "AGENTFN_JWKS_URL": f"{issuer}/.well-known/jwks.json",
                "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": SERVICE_ACCOUNT}

    def plan(self, dsns: dict[str, str]) -> None:
        ident = self.identity_env()
        registry = self.var / "registry.json"
        self.parts = [
            Part("issuer", "agentfn.shared.dev_issuer:create_app()", PORTS["issuer"],
                 {**ident, "AGENTFN_DEV_ISSUER_DIR": str(self.var / "issuer")}, ready="/healthz"),
            Part("registry", "operator local mode over examples/", None,
                 argv=[str(BIN / "python"), "-m", "agentfn_operator.local", str(ROOT / "examples"),
                       "--out", str(registry), "--watch"], ready_file=registry),
            Part("memory", "agentfn.memory.app:create_app()", PORTS["memory"],
                 {**ident, "AGENTFN_DATABASE_URL": dsns["memory"]}),
            Part("page", "agentfn.page.app:create_app()", PORTS["page"],
                 {**ident, "AGENTFN_DATABASE_URL": dsns["page"]}),
        ]
        for tool in READS:  # each read tool and the dev upstream (a test double) standing for its service
            upstream = f"{tool}-upstream"
            self.parts += [
                Part(upstream, f"agentfn.{tool}.dev_upstream:create_app()", PORTS[upstream], ident, ready="/healthz"),
                Part(tool, f"agentfn.{tool}.app:create_app()", PORTS[tool],
                     {**ident, f"AGENTFN_{tool.upper()}_UPSTREAM_URL": f"http://{HOST}:{PORTS[upstream]}"}),
            ]
        self.parts.append(Part("run_code", "agentfn.run_code.app:create_app()", PORTS["run_code"],
                               {**ident, "AGENTFN_DATABASE_URL": dsns["run_code"]}))

    def launch(self, part: Part) -> None:
        log = open(self.var / "logs" / f"{part.name}.log", "ab")
        env = {**os.environ, **part.env, "PORT": str(part.port), "AGENTFN_BIND": HOST}
        argv = part.argv or [str(BIN / "gunicorn"), "-c", "python:agentfn.shared.gunicorn_conf", part.app]
        part.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=die_with_parent)

    def is_ready(self, part: Part) -> bool:
        if part.ready_file is not None:
            return part.ready_file.exists()
        try:
            return requests.get(part.url + part.ready, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def wait_ready(self, part: Part, timeout: float = 120) -> float:
        started = time.monotonic()
        with self.console.status(f"starting {part.name}"):
            while time.monotonic() - started < timeout:
                if part.process.poll() is not None:
                    raise SystemExit(f"{part.name} exited; see {self.var / 'logs' / (part.name + '.log')}")
                if self.is_ready(part):
                    elapsed = time.monotonic() - started
                    where = part.url if part.port else part.ready_file
                    self.console.print(f"[green]✓[/] {part.name} ready: {where} ({elapsed:.1f} s)")
                    return elapsed
                time.sleep(0.1)
        raise SystemExit(f"{part.name} was not ready in {timeout:.0f} s; see {self.var / 'logs'}")

    def up(self) -> None:
        (self.var / "logs").mkdir(parents=True, exist_ok=True)
        self.check_ports()
        self.plan(self.start_postgres())
        (self.var / "registry.json").unlink(missing_ok=True)  # rewritten from examples/ at every start
        for part in self.parts:  # all at once: each loads on its own, two cores share the work
            self.launch(part)
        for part in self.parts:
            self.wait_ready(part)
        self.banner()

    def banner(self) -> None:
        memory = next(p for p in self.parts if p.name == "memory")
        self.console.rule("[bold]agentfn is up")
        for part in self.parts:
            if part.port and not part.name.endswith("-upstream"):
                self.console.print(f"{part.name:16} {part.url}")
        self.console.print(f"{'registry':16} {self.var / 'registry.json'} (from examples/, rewritten on change)")
        self.console.print("token    export TOKEN=$(.venv/bin/agentfn token alice)")
        self.console.print(f"try      curl -H \"Authorization: Bearer $TOKEN\" {memory.url}/v1/entries")
        self.console.print(f"logs     {self.var / 'logs'}        stop: Ctrl-C")

    def down(self) -> None:
        for part in reversed(self.parts):
            if part.process and part.process.poll() is None:
                os.killpg(part.process.pid, signal.SIGTERM)
        for part in self.parts:
            if part.process:
                try:
                    part.process.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(part.process.pid, signal.SIGKILL)
        self.postgres.stop()
        self.console.print("[green]✓[/] stopped")

    def wait(self) -> None:
        """Until Ctrl-C (or SIGTERM), or until a part dies."""
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            while True:
                for part in self.parts:
                    if part.process.poll() is not None:
                        self.console.print(f"[red]✗[/] {part.name} exited (code {part.process.returncode});"
                                           f" see {self.var / 'logs' / (part.name + '.log')}")
                        return
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
