"""The admin doors: what happened (the newest generations, never text) and who may call what (the registry's rows).

Only for callers whose token's groups include one of `AGENTFN_ADMIN_GROUPS`; any other caller gets 403, and no
token 401. A generation names its caller by `subject_hash`, the pseudonym the logs use, never by subject.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from functools import wraps

from agentfn.shared.app import subject_hash
from agentfn.shared.grants import records
from agentfn.shared.identity import caller_required
from agentfn.shared.problems import bad_request, forbidden
from flask import Blueprint, current_app, g, jsonify, request

from .services import Services

bp = Blueprint("admin", __name__)

GROUPS = "agentfn.model.admin_groups"  # the app's extension: the admin groups, a frozenset
LIMIT, MAX_LIMIT = 50, 200


def admin_required(view: Callable) -> Callable:
    """The caller's token verified (401), then one of its groups an admin group (403)."""

    @caller_required
    @wraps(view)
    def wrapped(*args, **kwargs):
        if not current_app.extensions[GROUPS] & set(g.caller.groups):
            raise forbidden("the admin doors are for callers in an admin group, and this token's groups include none")
        return view(*args, **kwargs)

    return wrapped


def services() -> Services:
    return current_app.extensions["agentfn.model"]


@bp.get("/v1/admin/generations")
@admin_required
def generations():
    """Every caller's generations, newest first: who (hashed), which agent and tier, tools, statuses, timings, tokens."""
    unknown = set(request.args) - {"limit", "before"}
    if unknown:
        raise bad_request(f"unknown query parameter {', '.join(sorted(unknown))}")
    limit, before = _limit(request.args.get("limit")), _before(request.args.get("before"))
    return jsonify(generations=[_generation(row) for row in services().store.recent(limit, before)])


@bp.get("/v1/admin/grants")
@admin_required
def grants():
    """Who may call what: the registry in force as rows, the rows `agentfn audit` prints."""
    table = services().registry.table()
    return jsonify(revision=table.revision, rows=records(list(table.rows)))


def _limit(raw: str | None) -> int:
    if raw is None:
        return LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise bad_request(f"limit: must be an integer from 1 to {MAX_LIMIT}")
    return int(raw)


def _before(raw: str | None) -> datetime.datetime | None:
    """An ISO 8601 time with its offset (a time without one is read as UTC)."""
    if raw is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(raw.upper())
    except ValueError:
        raise bad_request("before: must be an ISO 8601 date-time, e.g. 2026-01-31T12:00:00Z") from None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def _generation(row: dict) -> dict:
    return {
        "id": str(row["id"]), "kind": row["kind"], "channel": row["channel"], "subject_hash": subject_hash(row["subject"]),
        "agent": row["agent"], "tier": row["tier"], "status": row["status"], "problem": row["problem"],
        "tokens_in": row["tokens_in"], "tokens_out": row["tokens_out"], "rounds": row["rounds"], "steps": row["steps"],
        "tools": [{"tool": s.get("tool"), "status": s.get("status"), "ms": s.get("ms")} for s in row["step_log"]],
        "started_at": row["started_at"].isoformat(), "duration_ms": row["duration_ms"],
    }
