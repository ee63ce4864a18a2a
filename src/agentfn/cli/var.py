"""The local platform's folder `var/` and the files it keeps there for the parts (`Var`): secrets kept across
restarts, each part's own folder of `var/secrets/` (its projected volume), its Postgres password file, the registry's
folder and the logs."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .images import UID
from .parts import HOST, READS, Part


class Var:
    def __init__(self, root: Path, images: bool = False):
        self.root = root
        self.images = images  # the parts' files then go to the images' user
        # What a part reads as its pod reads a projected volume: var/secrets/<part>/, that part's alone.
        self.service_token_file = root / "secrets" / "model" / "memory-token"
        # Each part that exchanges tokens authenticates at the issuer with its own workload token (audience: the issuer).
        self.exchange_token_files = {part: root / "secrets" / part / "exchange-token" for part in ("model", *READS)}
        self.registry = root / "registry" / "registry.json"  # the operator's output, the ConfigMap in a cluster

    def secret(self, name: str, size: int = 24) -> str:
        """A secret kept in var/secrets (mode 0600) across restarts (roles keep working with existing data;
        approvals asked before a restart can still be answered after it)."""
        path = self.root / "secrets" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.write_text(secrets.token_urlsafe(size))
            path.chmod(0o600)
        self.hand_over(path)
        return path.read_text().strip()

    def hand_over(self, path: Path) -> None:
        """A file of var/secrets/<part>/ or var/registry/ given to the images' user, as the kubelet gives a pod's
        volumes to its user: from images the parts run as uid 10001, not as the stack's user."""
        if self.images and (path.parent.parent == self.root / "secrets" or path.parent == self.registry.parent):
            for owned in (path.parent, path) if path.exists() else (path.parent,):
                os.chown(owned, UID, UID)

    def replace(self, path: Path, data: bytes) -> None:
        """`path` (mode 0600, handed over) replaced whole: a part reading it on each use never reads half of it."""
        fresh = path.with_suffix(".new")
        fresh.write_bytes(data)
        fresh.chmod(0o600)
        self.hand_over(fresh)
        os.replace(fresh, path)

    def subject_hash_key_file(self) -> Path:
        """The deployment's key of subject_hash (48 random bytes, URL-safe), made once: a new key would name everyone
        anew, and logs before and after it would no longer join. One folder every part mounts, as every pod mounts
        the chart's one Secret."""
        self.secret("subject-hash/key", 48)
        return self.root / "secrets" / "subject-hash" / "key"

    def approval_key_file(self) -> Path:
        """The key the model function signs approval tokens with (48 random bytes, URL-safe)."""
        self.secret("model/approval-key", 48)
        return self.root / "secrets" / "model" / "approval-key"

    def dsn(self, part: str, role: str, password: str, port: int) -> str:
        """A part's DSN, its password in a libpq password file of the part's own folder (mode 0600, as a pod's
        projected Secret): never in the DSN, so never in an environment or on a command line."""
        passfile = self.root / "secrets" / part / "pgpass"
        passfile.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.replace(passfile, f"{HOST}:{port}:postgres:{role}:{password}\n".encode())
        return f"postgresql://{role}@{HOST}:{port}/postgres?passfile={passfile}"

    def log_of(self, part: Part) -> Path:
        return self.root / "logs" / f"{part.name}.log"
