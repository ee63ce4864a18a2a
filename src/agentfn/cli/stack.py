"""The local platform: every part on this machine, as it runs in a cluster (each function under gunicorn).

`agentfn up` starts embedded Postgres (data kept in `var/`), the dev issuer, the offline engine, every
function and the dev gateway in front of the public doors, shows progress, prints a banner when every door answers
(with the stack's resident memory), and meanwhile has the offline engine read each agent's system prompt once (its
prompt cache then holds them: the first turn is as quick as the later ones; a turn sent before that waits for it),
and stops everything on Ctrl-C.

`Stack` puts it together: the parts as planned (`plan`), each run as a process (`processes`) or from its image
(`pods`), waited for (`readiness`), then the banner (`banner`).
"""

from __future__ import annotations

import importlib.util
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from agentfn.shared import db

from . import banner, images, pods, processes, readiness, tokens
from .parts import HOST, PORTS, ROLES, ROOT, Part, port_taken
from .plan import offline_model, plan
from .postgres import EmbeddedPostgres
from .var import Var

if TYPE_CHECKING:
    from agentfn.devstack import weights


class Stack:
    def __init__(self, var: Path, console: Console, images: bool = False):
        self.var = Var(var.resolve(), images)
        self.console = console
        self.postgres = EmbeddedPostgres(self.var.root / "postgres", port=PORTS["postgres"])
        self.parts: list[Part] = []
        self.owns_postgres = False  # a start refused before Postgres (a port taken) leaves a running one alone
        self.started = time.monotonic()
        self.model: weights.Model | None = None  # the offline engine's, when it is started
        self.warming: threading.Thread | None = None  # its prompt cache being warmed (warm_engine)
        self.warmed = ""  # what came of it, said once it is done

    @property
    def images(self) -> bool:
        """Whether each function and the operator's local mode run from their images (agentfn.cli.images)."""
        return self.var.images

    @images.setter
    def images(self, value: bool) -> None:
        self.var.images = value  # the parts' files follow: a container's user must read them

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
                password = self.var.secret(f"{schema}-db")
                db.provision(self.postgres.admin_dsn, schema=schema, role=role, password=password)
                dsns[schema] = self.var.dsn(schema, role, password, self.postgres.port)
        self.console.print(f"[green]✓[/] Postgres on {HOST}:{self.postgres.port} (data in {self.postgres.data_dir})")
        return dsns

    def in_container(self, part: Part) -> bool:
        return pods.in_container(part, self.images)

    def launch(self, part: Part) -> None:
        log = open(self.var.log_of(part), "ab")
        if self.in_container(part):
            argv = pods.container(part, self.var).run_argv()
        else:
            argv = processes.command(part)
        processes.start(part, argv, log)

    def up(self) -> None:
        (self.var.root / "logs").mkdir(parents=True, exist_ok=True)
        self.check_stand_ins()
        self.model = offline_model()  # an unknown or missing offline model is one line before anything starts
        self.check_ports()
        if self.images:
            images.check_built()
        self.parts = plan(self.var, self.start_postgres(), self.model)
        self.var.registry.unlink(missing_ok=True)  # rewritten from examples/ at every start
        for path in (self.var.registry, self.var.service_token_file, *self.var.exchange_token_files.values()):
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.var.hand_over(path)
        for part in self.parts:  # all at once: each loads on its own, two cores share the work
            self.launch(part)
        for part in self.parts:
            readiness.wait_ready(part, self.var.log_of(part), self.console, self.started)
            if part.name == "issuer":
                tokens.rotate(self.var)
            elif part.name == "model" and self.model is not None:
                # As soon as the model function answers, while the parts after it get ready.
                self.warming = threading.Thread(target=self.warm_engine, name="warm-engine", daemon=True)
                self.warming.start()
        # Up once the doors answer: the warming goes on behind the banner (a turn meanwhile waits for its agent's
        # prompt to be read, and is told so); `wait` says how it went once it is done.
        banner.show(
            self.console,
            banner.resident(self.parts, self.postgres, self.images),
            since=self.started,
            model=self.model,
            warming=self.warming is not None and self.warming.is_alive(),
            from_images=self.images,
            var=self.var.root,
        )

    def warm_engine(self) -> None:
        self.warmed = readiness.warm_engine(self.started)

    def down(self) -> None:
        if not self.owns_postgres and not any(part.process for part in self.parts):
            return  # refused before anything started: nothing to stop, nothing to say
        processes.stop(self.parts)
        if self.images:  # a container whose podman was killed runs on without it
            images.remove([pods.container_name(part) for part in filter(self.in_container, self.parts)])
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
                            f"[red]✗[/] {part.name} exited (code {part.process.returncode}); see {self.var.log_of(part)}"
                        )
                        return
                if time.monotonic() - rotated > tokens.ROTATION_SECONDS:
                    tokens.rotate(self.var)
                    rotated = time.monotonic()
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
