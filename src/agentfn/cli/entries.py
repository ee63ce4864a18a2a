"""`agentfn memory`: the caller's entries through memory's doors; an id may be given by its prefix."""

from __future__ import annotations

import uuid
from collections import Counter

from .client import Client, Failure


def resolve(client: Client, given: str) -> str:
    """The full id: a whole id as given, else the one entry of the caller's whose id starts with it."""
    try:
        return str(uuid.UUID(given))
    except ValueError:
        pass
    prefix = given.lower()
    if len(prefix) < 4:
        raise Failure("the id is too short", "give at least 4 characters of the id (`agentfn memory list` shows them)")
    found = [e["id"] for e in client.entries() if e["id"].startswith(prefix)]
    if not found:
        raise Failure("no such entry", f"none of your entries has an id starting with {given}")
    if len(found) > 1:
        raise Failure("the id is ambiguous", f"{len(found)} of your entries start with {given}: {', '.join(found)}")
    return found[0]


def add(client: Client, kind: str, text: str, source: str) -> dict:
    return client.json("POST", "/v1/entries", json={"kind": kind, "text": text, "source": source})


def edit(client: Client, given: str, text: str | None, source: str | None) -> dict:
    body = {k: v for k, v in (("text", text), ("source", source)) if v is not None}
    if not body:
        raise Failure("nothing to change", "give --text, --source or both", code=2)
    return client.json("PATCH", f"/v1/entries/{resolve(client, given)}", json=body)


def forget(client: Client, given: str) -> str:
    entry_id = resolve(client, given)
    client.request("DELETE", f"/v1/entries/{entry_id}")
    return entry_id


PHRASE = "forget everything"  # what memory's DELETE /v1/entries takes as its confirmation, typed by the person
KINDS = ("fact", "preference", "episode")


def counts(client: Client) -> dict[str, int]:
    """How many entries of each kind the caller has."""
    found = Counter(e["kind"] for e in client.entries())
    return {kind: found[kind] for kind in KINDS}


def forget_all(client: Client) -> dict:
    """Every entry of the caller forgotten: memory's receipt (counts by kind, when)."""
    return client.json("DELETE", "/v1/entries", json={"confirm": PHRASE})
