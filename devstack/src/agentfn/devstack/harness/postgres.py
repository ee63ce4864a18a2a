"""Embedded Postgres as the tests and the benchmarks run it: outside any private temp tree, with each part's role and
schema provisioned as the chart's init job does."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

from agentfn.cli.postgres import EmbeddedPostgres
from agentfn.shared import db


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
