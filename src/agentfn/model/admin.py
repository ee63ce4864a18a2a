"""The admin doors: what happened (the newest generations and tool calls, never text) and who may call what (the
registry's rows).

Only for callers whose token's groups include one of `AGENTFN_ADMIN_GROUPS`; any other caller gets 403, and no
token 401. A generation names its caller by `subject_hash`, the pseudonym the logs use, never by subject.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import uuid
from collections.abc import Callable
from functools import wraps

from flask import Blueprint, current_app, g, jsonify, request

from agentfn.shared.contract import CHANNELS
from agentfn.shared.grants import records
from agentfn.shared.identity import caller_required
from agentfn.shared.problems import bad_request, forbidden
from agentfn.shared.pseudonym import subject_hash

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


CALL_FILTERS = {"agent", "tool", "channel", "outcome", "since", "before", "limit", "cursor"}


@bp.get("/v1/admin/calls")
@admin_required
def calls():
    """Every caller's tool calls, newest first: when, who (hashed), agent, tool, channel, outcome, ms, grant; never
    the arguments or the results. Filters: agent, tool, channel (step, alone, mcp), outcome, since, before; pages
    of `limit`, the next one asked for with the `next` cursor of this one."""
    unknown = set(request.args) - CALL_FILTERS
    if unknown:
        raise bad_request(f"unknown query parameter {', '.join(sorted(unknown))}")
    channel = request.args.get("channel")
    if channel is not None and channel not in CHANNELS:
        raise bad_request("channel: must be one of step, alone, mcp")
    for name in ("agent", "tool", "outcome"):
        # A name is matched as text in Postgres, which holds no NUL: refused here rather than failing there.
        if "\x00" in request.args.get(name, "") or len(request.args.get(name, "")) > 200:
            raise bad_request(f"{name}: at most 200 characters, and no NUL")
    limit = _limit(request.args.get("limit"))
    after = _cursor(request.args["cursor"]) if "cursor" in request.args else None
    before = _before(request.args.get("before"))
    if after is None and before is not None:
        after = (before, uuid.UUID(int=0), 0)  # strictly earlier than `before`
    rows = services().store.calls(
        limit=limit,
        since=_before(request.args.get("since"), "since"),
        after=after,
        agent=request.args.get("agent"),
        tool=request.args.get("tool"),
        channel=channel,
        outcome=request.args.get("outcome"),
    )
    last = rows[-1] if len(rows) == limit else None
    found = [_call(row) for row in rows]
    _join_pages(found)
    return jsonify(calls=found, next=_encode((last["started_at"].isoformat(), str(last["id"]), last["n"])) if last else None)


def _call(row: dict) -> dict:
    ms = row["ms"]
    return {
        "at": row["started_at"].isoformat(),
        "generation_id": str(row["id"]),
        "n": row["n"],
        "subject_hash": subject_hash(row["subject"]),
        "agent": row["agent"],
        "tool": row["tool"],
        "channel": row["channel"],
        "outcome": row["outcome"],
        "ms": ms if isinstance(ms, (int, float)) else None,
        "grant": row["grant_ref"],
    }


PAGE_AUDIT_SECONDS = 5.0


def _join_pages(found: list[dict]) -> None:
    """Each open_page call gets the page fetcher's audit of it (host, final host, status, bytes, outcome), matched
    by generation and step. `page` is null when there was no fetch (a window of a page open already, a refusal
    before any) or the page fetcher cannot say; `page_audit` says which: found, none or unavailable."""
    opened = [c for c in found if c["tool"] == "open_page"]
    if not opened:
        return
    fetches = services().tools.page_fetches(g.caller, sorted({c["generation_id"] for c in opened}), PAGE_AUDIT_SECONDS)
    by_step = {(f["generation_id"], f["n"]): f for f in fetches or []}
    for call in opened:
        fetch = by_step.get((call["generation_id"], call["n"]))
        call["page"] = None if fetch is None else {k: fetch[k] for k in ("host", "final_host", "status", "bytes", "outcome")}
        call["page_audit"] = "unavailable" if fetches is None else ("found" if fetch else "none")


def _encode(position: tuple) -> str:
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


def _cursor(raw: str) -> tuple:
    """The position a page ended at, as the `next` of the page before gave it."""
    try:
        at, gen, n = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        return datetime.datetime.fromisoformat(at), uuid.UUID(gen), int(n)
    except (ValueError, TypeError, binascii.Error):
        raise bad_request("cursor: must be the `next` of an earlier page") from None


def _limit(raw: str | None) -> int:
    if raw is None:
        return LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise bad_request(f"limit: must be an integer from 1 to {MAX_LIMIT}")
    return int(raw)


def _before(raw: str | None, name: str = "before") -> datetime.datetime | None:
    """An ISO 8601 time with its offset (a time without one is read as UTC)."""
    if raw is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(raw.upper())
    except ValueError:
        raise bad_request(f"{name}: must be an ISO 8601 date-time, e.g. 2026-01-31T12:00:00Z") from None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def _generation(row: dict) -> dict:
    return {
        "id": str(row["id"]),
        "kind": row["kind"],
        "channel": row["channel"],
        "subject_hash": subject_hash(row["subject"]),
        "agent": row["agent"],
        "tier": row["tier"],
        "status": row["status"],
        "problem": row["problem"],
        "tokens_in": row["tokens_in"],
        "tokens_out": row["tokens_out"],
        "rounds": row["rounds"],
        "steps": row["steps"],
        "tools": [{"tool": s.get("tool"), "status": s.get("status"), "ms": s.get("ms")} for s in row["step_log"]],
        "started_at": row["started_at"].isoformat(),
        "duration_ms": row["duration_ms"],
    }
