"""Agents: every change to one (created, edited, deleted, or seen at start-up) republishes the registry."""

from __future__ import annotations

import kopf


@kopf.on.event("agentfn.dev", "v1alpha1", "agents")
def agent_changed(type: str | None, name: str, memo: kopf.Memo, **_) -> None:
    memo.publisher.request(f"agent {name} {(type or 'listed').lower()}")
