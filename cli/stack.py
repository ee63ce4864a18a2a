"""The local platform: every part on this machine, as it runs in a cluster (each function under gunicorn).

`agentfn up` starts embedded Postgres (data kept in `var/`), the dev issuer and the functions, shows
progress, prints a banner when everything is ready and stops everything on Ctrl-C.
"""

from __future__ import annotations

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
HOST = "127.0.0.1"
SERVICE_ACCOUNT = "system:serviceaccount:agentfn:agentfn-model"
# One base port (the gateway's, later) and the parts above it: AGENTFN_DEV_PORT_BASE moves them all.
BASE = int(os.environ.get("AGENTFN_DEV_PORT_BASE", "8800"))
PORTS = {"issuer": BASE + 1, "memory": BASE + 2, "postgres": BASE + 99}


@dataclass
class Part:
    name: str
    app: str
    port: int
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


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

    def start_postgres(self) -> str:
        with self.console.status("starting Postgres + pgvector (embedded)"):
            self.postgres.start()
            password = self.secret("memory-db")
            db.provision(self.postgres.admin_dsn, schema="memory", role="agentfn_memory", password=password)
        self.console.print(f"[green]✓[/] Postgres on {HOST}:{self.postgres.port} (data in {self.postgres.data_dir})")
        return self.postgres.dsn("agentfn_memory", password)

    def identity_env(self) -> dict[str, str]:
        issuer = f"http://{HOST}:{PORTS['issuer']}"
        return {"AGENTFN_JWT_ISSUER": issuer, "AGENTFN_JWKS_URL": f"{issuer}/.well-known/jwks.json",
                "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": SERVICE_ACCOUNT}

    def plan(self, memory_dsn: str) -> None:
        ident = self.identity_env()
        self.parts = [
            Part("issuer", "agentfn.shared.dev_issuer:create_app()", PORTS["issuer"],
                 {**ident, "AGENTFN_DEV_ISSUER_DIR": str(self.var / "issuer")}),
            Part("memory", "agentfn.memory.app:create_app()", PORTS["memory"],
                 {**ident, "AGENTFN_DATABASE_URL": memory_dsn}),
        ]

    def launch(self, part: Part) -> None:
        log = open(self.var / "logs" / f"{part.name}.log", "ab")
        env = {**os.environ, **part.env, "PORT": str(part.port), "AGENTFN_BIND": HOST}
        part.process = subprocess.Popen(
            [str(BIN / "gunicorn"), "-c", "python:agentfn.shared.gunicorn_conf", part.app],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, part: Part, timeout: float = 120) -> float:
        started, path = time.monotonic(), "/readyz" if part.name != "issuer" else "/healthz"
        with self.console.status(f"starting {part.name} (loading models the first time)"):
            while time.monotonic() - started < timeout:
                if part.process.poll() is not None:
                    raise SystemExit(f"{part.name} exited; see {self.var / 'logs' / (part.name + '.log')}")
                try:
                    if requests.get(part.url + path, timeout=2).status_code == 200:
                        elapsed = time.monotonic() - started
                        self.console.print(f"[green]✓[/] {part.name} ready on {part.url} ({elapsed:.1f} s)")
                        return elapsed
                except requests.RequestException:
                    pass
                time.sleep(0.1)
        raise SystemExit(f"{part.name} was not ready in {timeout:.0f} s; see {self.var / 'logs'}")

    def up(self) -> None:
        (self.var / "logs").mkdir(parents=True, exist_ok=True)
        self.check_ports()
        self.plan(self.start_postgres())
        for part in self.parts:
            self.launch(part)
            self.wait_ready(part)
        self.banner()

    def banner(self) -> None:
        memory = next(p for p in self.parts if p.name == "memory")
        self.console.rule("[bold]agentfn is up")
        self.console.print(f"memory   {memory.url}   (openapi: {memory.url}/openapi.json)")
        self.console.print(f"issuer   http://{HOST}:{PORTS['issuer']}")
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
