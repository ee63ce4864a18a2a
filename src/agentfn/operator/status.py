"""An object's status from its verdict: the Ready and Invalid conditions, observedGeneration, the columns.

Pure: the writer asks `desired()` and patches only when it returns a change, so a reconcile that
changes nothing writes nothing (and a status write, which the watch sees, does not loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .reconcile import ObjectStatus


def _condition(
    kind: str, status: bool, reason: str, message: str, generation: int | None, current: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    value = "True" if status else "False"
    kept = current and current.get("status") == value and current.get("lastTransitionTime")
    condition = {"type": kind, "status": value, "reason": reason, "message": message, "lastTransitionTime": kept or now}
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def desired(verdict: ObjectStatus, current: Mapping[str, Any] | None, now: str) -> dict[str, Any] | None:
    """The status to write, or None when the object already shows it."""
    current = current or {}
    by_type = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, Mapping)}
    g = verdict.generation
    ready = _condition("Ready", verdict.ready, verdict.reason, verdict.message, g, by_type.get("Ready"), now)
    invalid = _condition(
        "Invalid",
        not verdict.ready,
        "Valid" if verdict.ready else verdict.reason,
        "no problem found" if verdict.ready else verdict.message,
        g,
        by_type.get("Invalid"),
        now,
    )
    # An empty column is an absent field (null deletes it in a merge patch): the column shows blank.
    columns = {k: v or None for k, v in verdict.columns.items()}
    body: dict[str, Any] = {**columns, "conditions": [ready, invalid]}
    if g is not None:
        body["observedGeneration"] = g
    if all(current.get(k) == v for k, v in body.items()):
        return None
    return body


def changed_readiness(verdict: ObjectStatus, current: Mapping[str, Any] | None) -> bool:
    """Whether the object's Ready condition (status or reason) changes: what an event is posted for."""
    conditions = (current or {}).get("conditions") or []
    ready = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"), {})
    return (ready.get("status"), ready.get("reason")) != ("True" if verdict.ready else "False", verdict.reason)
