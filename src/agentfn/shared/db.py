"""Postgres plumbing for the parts that own a schema: provisioning, migrations, a connection pool.

Each part has its own schema and its own login role that owns only that schema (least privilege:
no part can read another's tables). Migrations are numbered SQL files applied in order at start-up,
under an advisory lock, so two replicas starting at once apply each file exactly once.
"""

from __future__ import annotations

import logging
import re
import select
import time
import weakref
import zlib
from collections.abc import Callable
from importlib import resources

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

log = logging.getLogger("agentfn.db")

MIGRATION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def provision(admin_dsn: str, *, schema: str, role: str, password: str) -> None:
    """Create (idempotently) a part's role and schema, and the extensions parts use, as a database admin.

    The dev stack and the tests run this; in a cluster the database operator (or a DBA) does the same.
    """
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (zlib.crc32(b"agentfn.provision"),))
        try:
            for extension in ("vector", "unaccent"):
                conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {} SCHEMA public").format(sql.Identifier(extension)))
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            verb = "ALTER" if exists else "CREATE"
            conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {} AUTHORIZATION {}").format(
                    sql.Identifier(schema), sql.Identifier(role)
                )
            )
            # Nothing by default: a part's role reaches its own schema and the extension's types only.
            conn.execute(sql.SQL("REVOKE ALL ON SCHEMA public FROM PUBLIC"))
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(role)))
            dbname = conn.info.dbname
            conn.execute(sql.SQL("REVOKE CREATE, TEMPORARY ON DATABASE {} FROM PUBLIC").format(sql.Identifier(dbname)))
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (zlib.crc32(b"agentfn.provision"),))


def migrations(package: str) -> list[tuple[int, str, str]]:
    """(version, name, sql) of every migration file shipped in `package`'s `migrations` folder."""
    found = []
    for item in resources.files(package).joinpath("migrations").iterdir():
        match = MIGRATION_FILE.match(item.name)
        if match:
            found.append((int(match.group(1)), item.name, item.read_text()))
    return sorted(found)


def migrate(conn: psycopg.Connection, schema: str, package: str) -> list[str]:
    """Apply the package's pending migrations to `schema`; returns the names applied. Safe to race."""
    applied_now = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(f"agentfn.migrate.{schema}".encode()),))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.schema_migrations "
                "(version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(sql.Identifier(schema))
        )
        done = {
            row[0]
            for row in conn.execute(sql.SQL("SELECT version FROM {}.schema_migrations").format(sql.Identifier(schema)))
        }
        for version, name, text in migrations(package):
            if version in done:
                continue
            conn.execute(text)
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)").format(sql.Identifier(schema)),
                (version, name),
            )
            applied_now.append(name)
    for name in applied_now:
        log.info("migration applied", extra={"event": "migration", "part": schema, "where": name})
    return applied_now


def open_pool(
    dsn: str, *, schema: str, size: int, configure: Callable[[psycopg.Connection], None] | None = None, timeout: float = 3.0
) -> ConnectionPool:
    """A pool whose connections search the part's schema first; it reconnects by itself after an outage."""
    pool = ConnectionPool(
        dsn,
        min_size=1,
        max_size=size,
        kwargs={"options": f"-c search_path={schema},public", "connect_timeout": 3},
        configure=configure,
        check=_check,
        reset=_returned,
        timeout=timeout,
        open=False,
        name=f"agentfn-{schema}",
    )
    pool.open(wait=False)
    return pool


# When each pooled connection was last given back (the pool's `reset` hook stamps it).
_RETURNED: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()
CHECK_AFTER_IDLE = 30.0  # seconds: a peer that vanished without closing shows nothing on the socket


def _returned(conn: psycopg.Connection) -> None:
    _RETURNED[conn] = time.monotonic()


def _check(conn: psycopg.Connection) -> None:
    """The pool's check at each checkout. A connection whose server closed it (a restart, a terminated backend)
    shows that on its socket: it is readable, at an error or at EOF. Only then, or after a long idle, is the
    connection asked with a round trip, which the pool discards it on; a busy door saves that round trip."""
    idle = time.monotonic() - _RETURNED.get(conn, float("-inf"))
    if conn.closed or idle > CHECK_AFTER_IDLE or _readable(conn.pgconn.socket):
        ConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    poll = select.poll()
    poll.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poll.poll(0))


class SchemaStore:
    """A part's storage: its pool, and its migrations applied once per process (retried on the next use
    while the database is down). A part subclasses it with its SQL; `after_migrate` runs in the same
    connection, right after the migrations."""

    schema: str
    package: str
    outages = (psycopg.OperationalError, PoolTimeout)  # the database is not answering: a 503, never a 500

    def __init__(self, dsn: str, *, pool_size: int, configure: Callable[[psycopg.Connection], None] | None = None):
        self.pool = open_pool(dsn, schema=self.schema, size=pool_size, configure=configure)
        self._migrated = False

    def close(self) -> None:
        self.pool.close()

    def migrate(self) -> None:
        if self._migrated:
            return
        with self.pool.connection() as conn:
            migrate(conn, self.schema, self.package)
            self.after_migrate(conn)
        self._migrated = True

    def after_migrate(self, conn: psycopg.Connection) -> None:
        pass

    def ready(self) -> bool:
        """Readiness: the migrations applied, and the database answers."""
        self.migrate()
        return self.ping()

    def ping(self) -> bool:
        with self.pool.connection(timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
