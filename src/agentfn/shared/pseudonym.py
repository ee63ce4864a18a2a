"""How logs, traces and the admin doors name a caller: `subject_hash`, never the subject.

The pseudonym is HMAC-SHA256 of the subject keyed by a secret of the deployment, cut to 48 bits (12 hex digits):
short, and the same for one person in every part, worker, replica and restart of a deployment, so their records
join. An unkeyed hash would not be a pseudonym at all: anyone reading a log could hash a list of names and find
who is who. Without the key, the pseudonyms say nothing.

Every part that takes callers reads the key at start-up (`Identity.from_env`) and refuses to start without it: the
chart and `agentfn up` always make one, and a part that started anyway, with no key or a random one of its own,
would either leak names or name one person differently in each process, which an operator joining records would
not notice. A new key starts new pseudonyms: records before and after it no longer join.

Configuration: `SubjectHashSettings` below (docs/configuration.md).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from .settings import REQUIRED, Settings, setting

KEY_BYTES = 32  # at least SHA-256's own size (RFC 2104: a shorter key weakens the MAC)
HEX_DIGITS = 12  # 48 bits: one person's records join, and collisions stay rare among millions of subjects
VARIABLE = "AGENTFN_SUBJECT_HASH_KEY_FILE"


@dataclass(frozen=True)
class SubjectHashSettings(Settings):
    key_file: str = setting(
        VARIABLE,
        REQUIRED,
        "the deployment's key (32+ bytes, read at start-up) of `subject_hash`, the pseudonym logs, traces and the admin "
        "doors name a caller by; the chart mounts a Secret it makes once, `agentfn up` keeps one in "
        "`var/secrets/subject-hash/key`; without it a part that takes callers does not start",
    )


def read_key(env: Mapping[str, str]) -> bytes:
    """The key the environment names, or a RuntimeError naming the variable (never the file's content)."""
    path = SubjectHashSettings.from_env(env).key_file
    try:
        with open(path, "rb") as f:
            key = f.read().strip()
    except OSError:
        raise RuntimeError(f"{VARIABLE} cannot be read") from None
    if len(key) < KEY_BYTES:
        raise RuntimeError(f"{VARIABLE} must hold at least {KEY_BYTES} bytes")
    return key


_key: bytes | None = None  # this process's, set by the app of the part it serves


def use(key: bytes) -> None:
    """Name callers with this key in this process (one part a process: its app sets it)."""
    global _key
    _key = key


def subject_hash(subject: str, key: bytes | None = None) -> str:
    """The subject's pseudonym under `key`, else under this process's key."""
    return _keyed(subject.encode(), key)[:HEX_DIGITS]


def conversation_hash(agent: str, messages: list[dict]) -> str:
    """A conversation's name in the record: its agent and the person's first message, keyed as `subject_hash` is (an
    unkeyed hash of a short message could be reversed by trying messages), never their text."""
    first = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    return _keyed(f"conversation\0{agent}\0{first if isinstance(first, str) else ''}".encode())[:32]


def _keyed(data: bytes, key: bytes | None = None) -> str:
    key = key or _key
    if not key:  # never an HMAC under an empty key, which anyone could compute
        raise RuntimeError(f"no subject hash key in this process: a part that names callers reads {VARIABLE}")
    return hmac.new(key, data, hashlib.sha256).hexdigest()
