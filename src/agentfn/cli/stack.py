"""The local platform: every part on this machine, as it runs in a cluster (each function under gunicorn).

`agentfn up` starts embedded Postgres (data kept in `var/`), the dev issuer, the offline engine, every
function and the dev gateway in front of the public doors, shows progress, prints a banner when every door answers
(with the stack's resident memory), and meanwhile has the offline engine read each agent's system prompt once (its
prompt cache then holds them: the first turn is as quick as the later ones; a turn sent before that waits for it),
and stops everything on Ctrl-C.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import requests
from rich.console import Console

from agentfn.shared import db
from agentfn.shared.contract import audience

from . import images as containers
from .postgres import EmbeddedPostgres
from .settings import CliSettings

if TYPE_CHECKING:
    from agentfn.devstack import weights

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[3]  # the source tree: src/agentfn/cli/ is three below it
HOST = "127.0.0.1"
PR_SET_PDEATHSIG = 1
SERVICE_ACCOUNT = "system:serviceaccount:agentfn:agentfn-model"
WORKBENCH = "agentfn-workbench"  # the workbench's public client at the issuer
ADMINS = "platform-admins"  # the group the admin doors (and the workbench's admin page) are for
TOUR = ("alice", "developers,platform-users")  # the person of README's tour, as the banner's token line names them


def account(part: str) -> str:
    """The service account a part runs as, as in the chart (`agentfn-<part>` in namespace agentfn)."""
    return f"system:serviceaccount:agentfn:agentfn-{part.replace('_', '-')}"


# The gateway on the base port and the parts above it: AGENTFN_DEV_PORT_BASE moves them all.
BASE = CliSettings.from_env().dev_port_base
READS = ("platform_status", "list_models", "radar_latest")
PORTS = {
    "gateway": BASE,
    "issuer": BASE + 1,
    "memory": BASE + 2,
    "page": BASE + 3,
    "model": BASE + 4,
    "engine": BASE + 5,
    "workbench": BASE + 6,
    **{tool: BASE + 10 + n for n, tool in enumerate((*READS, "run_code"))},
    **{f"{tool}-upstream": BASE + 20 + n for n, tool in enumerate(READS)},
    "postgres": BASE + 99,
}
# Parts with a schema of their own: schema -> role.
ROLES = {"memory": "agentfn_memory", "page": "agentfn_page", "run_code": "agentfn_run_code", "model": "agentfn_model"}
# The offline tier: a shipped model (AGENTFN_ENGINE_MODEL, see agentfn.devstack.weights) on llama.cpp,
# JSON-constrained tool calls, greedy so a tour repeats itself. Set AGENTFN_TIER_FAST_URL (and its siblings)
# to use an engine of your own instead; then none is started.
OFFLINE_TIER = {
    "AGENTFN_TIERS": "fast",
    "AGENTFN_TIER_FAST_TOOL_MODE": "constrained",
    "AGENTFN_TIER_FAST_DEADLINE_SECONDS": "120",
    "AGENTFN_TIER_FAST_MAX_TOKENS": "160",
    "AGENTFN_TIER_FAST_TEMPERATURE": "0",
}
MODEL_SERVICE_AUDIENCE = "agentfn-model"  # the model function's service door (the engines' warm-up), not memory's
TOKEN_ROTATION_SECONDS = 1200  # the service token lives an hour; rotated well before, as the kubelet does


@dataclass
class Part:
    name: str
    app: str  # a gunicorn app spec, or for `argv` parts a label
    port: int | None
    env: dict[str, str] = field(default_factory=dict)
    doing: str = ""  # what its start is busy with, for the progress line
    ready: str = "/readyz"
    ready_status: int = 200
    argv: list[str] | None = None  # a plain process instead of gunicorn
    ready_file: Path | None = None  # for plain processes: ready when this file exists
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


# What each part reads: its settings objects (as docs/configuration.md lists them). Its container is given these
# names and no other.
OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
SHARED = ("agentfn.shared.server:ServerSettings", "agentfn.shared.telemetry:TelemetrySettings")
CALLERS = (*SHARED, "agentfn.shared.identity:IdentitySettings", "agentfn.shared.pseudonym:SubjectHashSettings")
EXCHANGES = (*CALLERS, "agentfn.shared.exchange:ExchangeSettings")
READ = {
    "memory": (*CALLERS, "agentfn.memory.settings:MemorySettings", "agentfn.memory.settings:EmbeddingSettings"),
    "page": (*CALLERS, "agentfn.page.settings:PageSettings"),
    **{tool: (*EXCHANGES, "agentfn.shared.read_tool:ReadToolSettings") for tool in READS},
    "run_code": (*CALLERS, "agentfn.run_code.settings:RunCodeSettings", "agentfn.run_code.settings:SandboxSettings"),
    "model": (
        *EXCHANGES,
        "agentfn.model.settings:ModelSettings",
        "agentfn.model.settings:ToolSettings",
        "agentfn.model.settings:TiersSettings",
        "agentfn.model.settings:TierSettings",
    ),
    "workbench": (*SHARED, "agentfn.workbench.settings:WorkbenchSettings", "agentfn.shared.identity:IdentitySettings"),
    "registry": (*SHARED, "agentfn.operator.config:Config"),
}


def settings_names(part: str) -> Callable[[str], bool]:
    """Whether a variable is one of the part's settings; a name's placeholder (`<T>`, `<NAME>`) stands for any tier
    or tool, and `<TOOL>` for the part itself."""
    patterns = []
    for path in READ[part]:
        module, _, name = path.partition(":")
        for variable, _, _ in getattr(importlib.import_module(module), name).describe():
            variable = variable.replace("<TOOL>", part.upper())
            patterns.append(re.sub("<[A-Z]+>", "[A-Z0-9_]+", re.escape(variable)))  # re.escape leaves < and >
    matches = re.compile("|".join(patterns)).fullmatch
    return lambda variable: matches(variable) is not None


def die_with_parent() -> None:
    """In the child before exec: the kernel sends it SIGTERM if `agentfn up` itself dies (even by SIGKILL)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((HOST, port)) == 0


class Stack:
    def __init__(self, var: Path, console: Console, images: bool = False):
        self.var = var.resolve()
        self.console = console
        self.images = images  # each function and the operator's local mode from its image (agentfn.cli.images)
        self.postgres = EmbeddedPostgres(self.var / "postgres", port=PORTS["postgres"])
        self.parts: list[Part] = []
        self.owns_postgres = False  # a start refused before Postgres (a port taken) leaves a running one alone
        # What a part reads as its pod reads a projected volume: var/secrets/<part>/, that part's alone.
        self.service_token_file = self.var / "secrets" / "model" / "memory-token"
        # Each part that exchanges tokens authenticates at the issuer with its own workload token (audience: the issuer).
        self.exchange_token_files = {part: self.var / "secrets" / part / "exchange-token" for part in ("model", *READS)}
        self.registry = self.var / "registry" / "registry.json"  # the operator's output, the ConfigMap in a cluster
        self.started = time.monotonic()
        self.model: weights.Model | None = None  # the offline engine's, when it is started
        self.warming: threading.Thread | None = None  # its prompt cache being warmed (warm_engine)
        self.warmed = ""  # what came of it, said once it is done

    def secret(self, name: str, size: int = 24) -> str:
        """A secret kept in var/secrets (mode 0600) across restarts (roles keep working with existing data;
        approvals asked before a restart can still be answered after it)."""
        path = self.var / "secrets" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.write_text(secrets.token_urlsafe(size))
            path.chmod(0o600)
        self.hand_over(path)
        return path.read_text().strip()

    def hand_over(self, path: Path) -> None:
        """A file of var/secrets/<part>/ or var/registry/ given to the images' user, as the kubelet gives a pod's
        volumes to its user: from images the parts run as uid 10001, not as the stack's user."""
        if self.images and (path.parent.parent == self.var / "secrets" or path.parent == self.registry.parent):
            for owned in (path.parent, path) if path.exists() else (path.parent,):
                os.chown(owned, containers.UID, containers.UID)

    def subject_hash_key_file(self) -> Path:
        """The deployment's key of subject_hash (48 random bytes, URL-safe), made once: a new key would name everyone
        anew, and logs before and after it would no longer join. One folder every part mounts, as every pod mounts
        the chart's one Secret."""
        self.secret("subject-hash/key", 48)
        return self.var / "secrets" / "subject-hash" / "key"

    def approval_key_file(self) -> Path:
        """The key the model function signs approval tokens with (48 random bytes, URL-safe)."""
        self.secret("model/approval-key", 48)
        return self.var / "secrets" / "model" / "approval-key"

    def check_stand_ins(self) -> None:
        # The dev issuer and the platform services' test doubles are a distribution of their own, never in an image.
        if importlib.util.find_spec("agentfn.devstack") is None:
            raise SystemExit(
                f"agentfn up runs the dev stack's stand-ins, which are not installed: pip install -e {ROOT / 'devstack'}"
            )

    def check_ports(self) -> None:
        taken = [f"{name} ({port})" for name, port in PORTS.items() if port_taken(port)]
        if taken:
            raise SystemExit(
                f"port already taken: {', '.join(taken)}. Is another `agentfn up` running? "
                "AGENTFN_DEV_PORT_BASE moves every port."
            )

    def start_postgres(self) -> dict[str, str]:
        """Start Postgres and give each part with a schema its own role; returns each part's DSN."""
        dsns = {}
        with self.console.status("starting Postgres + pgvector (embedded)"):
            self.postgres.start()
            self.owns_postgres = True  # started or taken over: stopped with the stack
            for schema, role in ROLES.items():
                password = self.secret(f"{schema}-db")
                db.provision(self.postgres.admin_dsn, schema=schema, role=role, password=password)
                dsns[schema] = self.dsn(schema, role, password)
        self.console.print(f"[green]✓[/] Postgres on {HOST}:{self.postgres.port} (data in {self.postgres.data_dir})")
        return dsns

    def dsn(self, part: str, role: str, password: str) -> str:
        """A part's DSN, its password in a libpq password file of the part's own folder (mode 0600, as a pod's
        projected Secret): never in the DSN, so never in an environment or on a command line."""
        passfile = self.var / "secrets" / part / "pgpass"
        passfile.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fresh = passfile.with_suffix(".new")
        fresh.write_text(f"{HOST}:{self.postgres.port}:postgres:{role}:{password}\n")
        fresh.chmod(0o600)
        self.hand_over(fresh)
        os.replace(fresh, passfile)
        return f"postgresql://{role}@{HOST}:{self.postgres.port}/postgres?passfile={passfile}"

    def identity_env(self) -> dict[str, str]:
        issuer = f"http://{HOST}:{PORTS['issuer']}"
        return {
            "AGENTFN_JWT_ISSUER": issuer,
            "AGENTFN_JWKS_URL": f"{issuer}/.well-known/jwks.json",
            "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": SERVICE_ACCOUNT,
            "AGENTFN_TRUSTED_ACTORS": SERVICE_ACCOUNT,
            "AGENTFN_SUBJECT_HASH_KEY_FILE": str(self.subject_hash_key_file()),
        }

    def exchange_clients(self) -> str:
        """Who may exchange what at the dev issuer: the model function toward every part, each read tool toward
        its upstream (the configuration a real issuer keeps as clients and their allowed audiences)."""
        clients = {
            SERVICE_ACCOUNT: {
                "subject_audiences": ["agentfn", self.mcp_resource],
                "audiences": [
                    audience("memory"),
                    audience("page"),
                    *(audience("tool", tool) for tool in (*READS, "run_code")),
                ],
            }
        }
        for tool in READS:
            clients[account(tool)] = {
                "subject_audiences": [audience("tool", tool)],
                "audiences": [audience("upstream", tool)],
            }
        return json.dumps(clients)

    def web_clients(self) -> str:
        """Who signs people in at the dev issuer: the workbench, sent back to the gateway's site root (exactly)."""
        return json.dumps({WORKBENCH: {"redirect_uris": [f"http://{HOST}:{PORTS['gateway']}/"], "audience": "agentfn"}})

    @property
    def mcp_resource(self) -> str:
        return f"http://{HOST}:{PORTS['gateway']}/mcp"

    def tier_env(self) -> tuple[dict[str, str], bool]:
        """The model function's tiers, and whether the offline engine is needed for them."""
        if os.environ.get("AGENTFN_TIER_FAST_URL"):
            return {}, False  # the caller's own engine, configured in the environment
        from agentfn.devstack import weights  # the stand-ins' distribution: checked to be there before this

        self.model = weights.chosen()
        weights.path(self.model)  # not installed: one line saying how, before anything starts
        return {
            **OFFLINE_TIER,
            "AGENTFN_TIER_FAST_URL": f"http://{HOST}:{PORTS['engine']}/v1",
            "AGENTFN_TIER_FAST_MODEL": self.model.alias,
            "AGENTFN_TIER_FAST_CONTEXT_TOKENS": str(self.model.context),
        }, True

    def plan(self, dsns: dict[str, str]) -> None:
        ident = self.identity_env()
        registry = self.registry
        url = {name: f"http://{HOST}:{port}" for name, port in PORTS.items()}
        tiers, offline = self.tier_env()
        self.parts = [
            Part(
                "issuer",
                "agentfn.devstack.issuer:create_app()",
                PORTS["issuer"],
                {
                    **ident,
                    "AGENTFN_DEV_ISSUER_DIR": str(self.var / "issuer"),
                    "AGENTFN_DEV_ISSUER_CLIENTS": self.exchange_clients(),
                    "AGENTFN_DEV_ISSUER_WEB_CLIENTS": self.web_clients(),
                },
                ready="/healthz",
            ),
            Part(
                "registry",
                "operator local mode over examples/",
                None,
                doing="reconciling examples/",
                argv=[
                    str(BIN / "python"),
                    "-m",
                    "agentfn.operator.local",
                    str(ROOT / "examples"),
                    "--out",
                    str(registry),
                    "--watch",
                ],
                ready_file=registry,
            ),
        ]
        if offline:
            self.parts.append(
                Part(
                    "engine",
                    "the offline engine",
                    PORTS["engine"],
                    ready="/health",
                    doing=f"loading {self.model.alias} on llama.cpp",
                    argv=[
                        str(BIN / "python"),
                        "-m",
                        "agentfn.devstack.engine_server",
                        "--port",
                        str(PORTS["engine"]),
                        "--model",
                        self.model.name,
                    ],
                )
            )
        self.parts += [
            Part(
                "memory",
                "agentfn.memory.app:create_app()",
                PORTS["memory"],
                {**ident, "AGENTFN_DATABASE_URL": dsns["memory"]},
                doing="loading the multilingual embedder",
            ),
            Part("page", "agentfn.page.app:create_app()", PORTS["page"], {**ident, "AGENTFN_DATABASE_URL": dsns["page"]}),
        ]
        for tool in READS:  # each read tool and the dev upstream (a test double) standing for its service
            upstream = f"{tool}-upstream"
            self.parts += [
                Part(
                    upstream,
                    f"agentfn.devstack.{tool}:create_app()",
                    PORTS[upstream],
                    {**ident, "AGENTFN_TRUSTED_ACTORS": account(tool)},
                    ready="/healthz",
                ),
                Part(
                    tool,
                    f"agentfn.{tool}.app:create_app()",
                    PORTS[tool],
                    {
                        **ident,
                        f"AGENTFN_{tool.upper()}_UPSTREAM_URL": url[upstream],
                        "AGENTFN_EXCHANGE_TOKEN_FILE": str(self.exchange_token_files[tool]),
                    },
                ),
            ]
        self.parts += [
            Part(
                "run_code",
                "agentfn.run_code.app:create_app()",
                PORTS["run_code"],
                {**ident, "AGENTFN_DATABASE_URL": dsns["run_code"]},
            ),
            Part(
                "model",
                "agentfn.model.app:create_app()",
                PORTS["model"],
                {
                    **ident,
                    **tiers,
                    "AGENTFN_DATABASE_URL": dsns["model"],
                    "AGENTFN_REGISTRY_FILE": str(registry),
                    "AGENTFN_MEMORY_URL": url["memory"],
                    "AGENTFN_PAGE_URL": url["page"],
                    "AGENTFN_SERVICE_TOKEN_FILE": str(self.service_token_file),
                    "AGENTFN_THREADS": "8",
                    "AGENTFN_APPROVAL_KEY_FILE": str(self.approval_key_file()),
                    "AGENTFN_EXCHANGE_TOKEN_FILE": str(self.exchange_token_files["model"]),
                    "AGENTFN_MCP_RESOURCE": self.mcp_resource,
                    "AGENTFN_ADMIN_GROUPS": ADMINS,
                    "AGENTFN_SERVICE_JWT_AUDIENCE": MODEL_SERVICE_AUDIENCE,
                    **{f"AGENTFN_TOOL_{tool.upper()}_URL": url[tool] for tool in (*READS, "run_code")},
                },
            ),
            # The workbench serves a page and names no caller: no subject_hash key, as in the chart.
            Part(
                "workbench",
                "agentfn.workbench.app:create_app()",
                PORTS["workbench"],
                {**{k: v for k, v in ident.items() if k != "AGENTFN_SUBJECT_HASH_KEY_FILE"}, "AGENTFN_ADMIN_GROUPS": ADMINS},
            ),
            # Ready when a public door answers through it: the model function's 401 to a caller without a token.
            Part(
                "gateway",
                "agentfn.cli.gateway:create_app()",
                PORTS["gateway"],
                {
                    "AGENTFN_GATEWAY_MEMORY_URL": url["memory"],
                    "AGENTFN_GATEWAY_MODEL_URL": url["model"],
                    "AGENTFN_GATEWAY_WORKBENCH_URL": url["workbench"],
                    "AGENTFN_THREADS": "16",
                },
                ready="/v1/agents",
                ready_status=401,
            ),
        ]

    def launch(self, part: Part) -> None:
        log = open(self.var / "logs" / f"{part.name}.log", "ab")
        env = {**os.environ, **part.env, "PORT": str(part.port), "AGENTFN_BIND": HOST}
        if self.in_container(part):
            argv = self.container(part).run_argv()
        else:
            argv = part.argv or [str(BIN / "gunicorn"), "-c", "python:agentfn.shared.gunicorn_conf", part.app]
        part.process = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
        )

    def container(self, part: Part) -> containers.Container:
        """A part as a container of its image, given only what its pod is given: the settings its part reads (`READ`,
        from its settings objects: the stack's for it, and of this environment only those names), never another's
        (a person's AGENTFN_TOKEN stays here), in an env file only root reads (nothing on podman's command line); and
        as mounts only its own folder of var/secrets (a projected volume), the deployment's subject-hash key (but the
        workbench's), the registry's folder (the operator writes it, the model function reads it) and examples/ for
        the operator. A file a setting of this environment names (an engine's key file) is copied into the part's own
        folder first: no mount is ever made from an environment value."""
        names = settings_names(part.name)
        own = self.var / "secrets" / part.name
        env = {name: value for name, value in os.environ.items() if names(name)}
        if not any(name in env for name in OTLP_ENDPOINTS):  # nothing exported: no collector's headers either
            env = {name: value for name, value in env.items() if not name.startswith("OTEL_")}
        planned = {**part.env, "AGENTFN_BIND": HOST} | ({"PORT": str(part.port)} if part.port else {})
        strays = sorted(name for name in planned if not names(name))
        if strays:
            raise RuntimeError(f"{part.name} is given settings it does not read: {', '.join(strays)}")
        env |= planned
        for name, value in sorted(env.items()):
            if name.endswith("_FILE") and name not in planned and value:
                env[name] = str(self.own_copy(own, Path(value)))
        own.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.hand_over(own / "pgpass")  # the folder, whether or not the part has that file
        readable = {own}
        if "AGENTFN_SUBJECT_HASH_KEY_FILE" in env:
            readable.add(self.subject_hash_key_file().parent)
        if part.name == "model":
            readable.add(self.registry.parent)
        if part.name == "registry":
            readable.add(ROOT / "examples")
        writable = {self.registry.parent} if part.name == "registry" else set()
        named = [value for name, value in env.items() if name.endswith("_FILE")]
        named.append(env.get("AGENTFN_DATABASE_URL", "").partition("passfile=")[2])
        for path in (Path(value) for value in named if value):  # each file a setting names, under one of its mounts
            if path.is_absolute() and not any(path.is_relative_to(m) for m in readable | writable):
                raise RuntimeError(f"{part.name}: {path} is not under any of its mounts")
        argv = tuple(arg.replace(str(BIN / "python"), "python") for arg in part.argv or ())
        return containers.Container(
            "operator" if part.name == "registry" else part.name,
            self.container_name(part),
            self.env_file(part, env),
            tuple(sorted(readable - writable)),
            tuple(sorted(writable)),
            argv,
        )

    def own_copy(self, own: Path, source: Path) -> Path:
        """A file named by a setting of this environment, copied into the part's own folder (mode 0600)."""
        copy = own / f"from-env-{source.name}"
        try:
            data = source.read_bytes()
        except OSError as error:
            raise SystemExit(f"cannot read {source}, which a setting of this environment names: {error.strerror}") from None
        fresh = copy.with_suffix(".new")
        fresh.write_bytes(data)
        fresh.chmod(0o600)
        self.hand_over(fresh)
        os.replace(fresh, copy)
        return copy

    def env_file(self, part: Part, env: dict[str, str]) -> Path:
        """The container's settings as a file only root reads (podman reads it as the container is made), so that no
        value is ever on a command line, where any local user reads it (/proc/<pid>/cmdline)."""
        folder = self.var / "containers"
        folder.mkdir(exist_ok=True, mode=0o700)
        folder.chmod(0o700)
        return containers.env_file(folder / f"{part.name}.env", env)

    @staticmethod
    def container_name(part: Part) -> str:
        return f"agentfn-{part.name.replace('_', '-')}-{BASE}"

    def is_ready(self, part: Part) -> bool:
        if part.ready_file is not None:
            return part.ready_file.exists()
        try:
            return requests.get(part.url + part.ready, timeout=2).status_code == part.ready_status
        except requests.RequestException:
            return False

    def log_of(self, part: Part) -> Path:
        return self.var / "logs" / f"{part.name}.log"

    def exited(self, part: Part) -> SystemExit:
        """A part that died at start: why, in its own words (a missing dependency says so), not a traceback."""
        return SystemExit(
            f"{part.name} exited (code {part.process.returncode}): {last_words(self.log_of(part))}\nsee {self.log_of(part)}"
        )

    def wait_ready(self, part: Part, timeout: float = 180) -> float:
        started = time.monotonic()
        with self.console.status(f"starting {part.name}" + (f": {part.doing}" if part.doing else "")):
            while time.monotonic() - started < timeout:
                if part.process.poll() is not None:
                    raise self.exited(part)
                if self.is_ready(part):
                    where = part.url if part.port else part.ready_file
                    self.console.print(f"[green]✓[/] {part.name} ready: {where} ({time.monotonic() - self.started:.1f} s)")
                    return time.monotonic() - started
                time.sleep(0.1)
        raise SystemExit(f"{part.name} was not ready in {timeout:.0f} s; see {self.log_of(part)}")

    def rotate_service_token(self) -> None:
        """The workload tokens, as projected ServiceAccount tokens would be: the model function's for WriteEpisode
        (audience memory's service door), and each exchanging part's for the issuer (audience the issuer)."""
        issuer = f"http://{HOST}:{PORTS['issuer']}"
        self.write_token(self.service_token_file, SERVICE_ACCOUNT, "agentfn-memory")
        for part, path in self.exchange_token_files.items():
            self.write_token(path, SERVICE_ACCOUNT if part == "model" else account(part), issuer)

    def write_token(self, path: Path, service_account: str, audience: str) -> None:
        answer = requests.post(
            f"http://{HOST}:{PORTS['issuer']}/v1/service-tokens",
            json={"account": service_account, "audience": audience},
            timeout=5,
        )
        answer.raise_for_status()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fresh = path.with_suffix(".new")
        fresh.write_text(answer.json()["token"])
        fresh.chmod(0o600)
        self.hand_over(fresh)
        os.replace(fresh, path)  # read on each use: never half a token

    def up(self) -> None:
        (self.var / "logs").mkdir(parents=True, exist_ok=True)
        self.check_stand_ins()
        self.tier_env()  # an unknown or missing offline model is one line before anything starts
        self.check_ports()
        if self.images:
            containers.check_built()
        self.plan(self.start_postgres())
        self.registry.unlink(missing_ok=True)  # rewritten from examples/ at every start
        for path in (self.registry, self.service_token_file, *self.exchange_token_files.values()):
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.hand_over(path)
        for part in self.parts:  # all at once: each loads on its own, two cores share the work
            self.launch(part)
        for part in self.parts:
            self.wait_ready(part)
            if part.name == "issuer":
                self.rotate_service_token()
            elif part.name == "model" and self.model is not None:
                # As soon as the model function answers, while the parts after it get ready.
                self.warming = threading.Thread(target=self.warm_engine, name="warm-engine", daemon=True)
                self.warming.start()
        # Up once the doors answer: the warming goes on behind the banner (a turn meanwhile waits for its agent's
        # prompt to be read, and is told so); `wait` says how it went once it is done.
        self.banner()

    def warm_engine(self) -> None:
        """The offline engine's prompt cache, given the system prompt of each agent the tour's person is granted, as
        the model function builds it for their turns (the code reviewer's first): the first turn then reads only
        what is new, as later turns do, instead of the whole prompt (about 900 tokens: most of a minute on 2
        cores). An engine of one's own is sent nothing unasked."""
        started = time.monotonic()
        subject, groups = TOUR
        issuer = f"http://{HOST}:{PORTS['issuer']}"
        try:
            # The door is the platform's own: the model function's account asks (a token of its service audience,
            # as a projected token would be), naming the person whose turns to warm by their token.
            service = requests.post(
                f"{issuer}/v1/service-tokens",
                json={"account": SERVICE_ACCOUNT, "audience": MODEL_SERVICE_AUDIENCE},
                timeout=5,
            )
            service.raise_for_status()
            person = requests.post(
                f"{issuer}/v1/tokens", json={"subject": subject, "groups": groups.split(","), "ttl": 900}, timeout=5
            )
            person.raise_for_status()
            answer = requests.post(
                f"http://{HOST}:{PORTS['model']}/internal/v1/engines/warm",
                headers={"Authorization": f"Bearer {service.json()['token']}"},
                json={"caller": person.json()["token"]},
                timeout=900,
            )
            answer.raise_for_status()
            agents = answer.json()["agents"]
        except (requests.RequestException, ValueError, KeyError) as error:
            self.warmed = (
                f"[yellow]![/] the engine's prompt cache was not warmed ({type(error).__name__}): the first turn reads "
                "the whole system prompt"
            )
            return
        warmed = ", ".join(a["agent"] for a in agents if a["ok"]) or "no agent"
        missed = ", ".join(f"{a['agent']} ({a.get('failed', 'failed')})" for a in agents if not a["ok"])
        self.warmed = (
            f"[green]✓[/] engine's prompt cache warmed for {warmed}{f'; not for {missed}' if missed else ''} "
            f"in {time.monotonic() - started:.1f} s ({time.monotonic() - self.started:.1f} s)"
        )

    def in_container(self, part: Part) -> bool:
        return self.images and (part.name in containers.FUNCTIONS or part.name == "registry")

    def resident(self) -> dict[str, int]:
        """Proportional resident memory (PSS, shared pages split) of each part's processes, and Postgres's."""
        pids = {part.name: part.process.pid for part in self.parts if part.process}
        for part in filter(self.in_container, self.parts):  # its processes are the container's, not podman's
            pids[part.name] = containers.pid(self.container_name(part)) or pids[part.name]
        if self.postgres.pid():
            pids["postgres"] = self.postgres.pid()
        return {name: sum(pss(p) for p in process_tree(pid)) for name, pid in pids.items()}

    def banner(self) -> None:
        gateway = f"http://{HOST}:{PORTS['gateway']}"
        memory = self.resident()
        biggest = ", ".join(f"{name} {size / 2**20:.0f}" for name, size in sorted(memory.items(), key=lambda kv: -kv[1])[:5])
        agentfn = os.path.relpath(BIN / "agentfn") if (BIN / "agentfn").is_relative_to(Path.cwd()) else BIN / "agentfn"
        self.console.rule(f"[bold]agentfn is up[/] in {time.monotonic() - self.started:.1f} s")
        for name, value in (
            (
                "gateway",
                f"{gateway}   (the public doors: /v1/entries, /v1/recall, /v1/agents, /v1/tools, /mcp; "
                "/v1/admin for the group platform-admins)",
            ),
            ("workbench", f"{gateway}/   (in a browser: sign in at the dev issuer's page, as anyone)"),
            ("token", f"export AGENTFN_TOKEN=$({agentfn} token {TOUR[0]} --groups {TOUR[1]})"),
            ("chat", f"{agentfn} chat code-reviewer"),
            (
                "engine",
                f"{self.model.alias} offline on llama.cpp (AGENTFN_ENGINE_MODEL={self.model.name})"
                + (
                    "; reading each agent's system prompt once (a turn meanwhile waits for it, and is told so)"
                    if self.warming is not None and self.warming.is_alive()
                    else ""
                )
                if self.model
                else f"{os.environ.get('AGENTFN_TIER_FAST_MODEL', 'default')} at {os.environ['AGENTFN_TIER_FAST_URL']}",
            ),
            ("memory", f"{sum(memory.values()) / 2**20:.0f} MiB resident (MiB: {biggest}, ...)"),
            *(
                [("images", "each function and the operator from its image (agentfn images), as the chart runs them")]
                if self.images
                else []
            ),
            ("data", f"{self.var}   logs: {self.var / 'logs'}   agents: examples/ (edit to update)"),
            ("stop", "Ctrl-C"),
        ):
            self.console.print(f"{name:10} {value}", soft_wrap=True, highlight=False)

    def down(self) -> None:
        if not self.owns_postgres and not any(part.process for part in self.parts):
            return  # refused before anything started: nothing to stop, nothing to say
        for part in reversed(self.parts):
            if part.process and part.process.poll() is None:
                os.killpg(part.process.pid, signal.SIGTERM)
        for part in self.parts:
            if part.process:
                try:
                    part.process.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(part.process.pid, signal.SIGKILL)
        if self.images:  # a container whose podman was killed runs on without it
            containers.remove([self.container_name(part) for part in filter(self.in_container, self.parts)])
        if self.owns_postgres:
            self.postgres.stop()
        self.console.print("[green]✓[/] stopped")

    def wait(self) -> None:
        """Until Ctrl-C (or SIGTERM), or until a part dies; the service token is rotated meanwhile."""
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        rotated = time.monotonic()
        try:
            while True:
                if self.warming is not None and not self.warming.is_alive():
                    self.console.print(self.warmed, highlight=False, soft_wrap=True)
                    self.warming = None
                for part in self.parts:
                    if part.process.poll() is not None:
                        self.console.print(
                            f"[red]✗[/] {part.name} exited (code {part.process.returncode}); see {self.log_of(part)}"
                        )
                        return
                if time.monotonic() - rotated > TOKEN_ROTATION_SECONDS:
                    self.rotate_service_token()
                    rotated = time.monotonic()
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


def last_words(log: Path) -> str:
    """The error that ended a process: the last line of the last exception gunicorn logged (as JSON), else the
    log's last line (a plain process's own message)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("exc"), str):
            return record["exc"].strip().splitlines()[-1][:300]
    return lines[-1][:300] if lines else "(no output)"


def process_tree(root: int) -> list[int]:
    """`root` and every descendant, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def pss(pid: int) -> int:
    """Bytes of proportional set size of one process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
