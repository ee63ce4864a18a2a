"""ToolGrants: every change to one republishes the registry; a deleted grant's access goes at once."""

from __future__ import annotations

import kopf


@kopf.on.event("agentfn.dev", "v1alpha1", "toolgrants")
def grant_changed(type: str | None, name: str, memo: kopf.Memo, **_) -> None:
    memo.publisher.request(f"grant {name} {(type or 'listed').lower()}")
