"""Who the parts are, as the chart and the dev stack name them, and the dev issuer served in this process: the service
accounts, the deployment's key of the callers' pseudonym, and an issuer to mint the callers' tokens."""

from __future__ import annotations

import secrets
from pathlib import Path

from agentfn.devstack.issuer import DevIssuer, create_app

from .ports import free_port
from .servers import Served

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"


def account(part: str) -> str:
    """A part's service account, as the chart and the dev stack name it."""
    return f"system:serviceaccount:agentfn:agentfn-{part.replace('_', '-')}"


def subject_hash_key(directory: str | Path) -> dict[str, str]:
    """The setting of the deployment's key of subject_hash, its file made once in `directory` (as the chart's Secret
    or `agentfn up`'s var/secrets/subject-hash/key holds it): every part that takes callers needs it to start."""
    path = Path(directory) / "subject-hash-key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return {"AGENTFN_SUBJECT_HASH_KEY_FILE": str(path)}


def dev_issuer(directory: Path, *args, kind: type[DevIssuer] = DevIssuer, **options) -> tuple[DevIssuer, Served]:
    """The dev issuer (or a `kind` of it) in this process: what mints the callers' tokens and serves the keys that
    verify them. Stop the `Served` to stop it."""
    port = free_port()
    issuer = kind(directory, f"http://127.0.0.1:{port}", *args, **options)
    return issuer, Served(create_app(issuer), port)
