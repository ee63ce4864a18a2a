"""The page fetcher's door: POST /v1/open, for callers (the model function forwards them)."""

from __future__ import annotations

import re

from flask import Blueprint, current_app, g, jsonify, request

from agentfn.shared.identity import caller_required
from agentfn.shared.problems import bad_request, forbidden
from agentfn.shared.tool_function import LazySchema

from . import schemas
from .pages import Pages

bp = Blueprint("page", __name__)

# Compiled on first use or by the warm-up: jsonschema is off the way to ready.
OPEN = LazySchema(schemas.OPEN)


def pages() -> Pages:
    return current_app.extensions["agentfn.page"]


@bp.post("/v1/open")
@caller_required
def open_page():
    """A window of a public page's readable text, with the links in it numbered."""
    from agentfn.shared.validation import json_body

    body = json_body(OPEN.get())
    window = body.get("window", current_app.config["AGENTFN_PAGE_WINDOW"])
    return jsonify(
        pages().open(
            g.caller.subject,
            body["url"],
            body.get("offset", 0),
            window,
            g.get("request_id"),
            (body["step"]["generation_id"], body["step"]["n"]) if "step" in body else None,
        )
    )


@bp.get("/v1/audit")
@caller_required
def audit():
    """For a caller in an admin group: the fetches of the generations named, by host and size, never a path."""
    if not current_app.config["AGENTFN_ADMIN_GROUPS"] & set(g.caller.groups):
        raise forbidden("the fetch audit is for callers in an admin group, and this token's groups include none")
    if set(request.args) - {"generation_id"}:
        raise bad_request("only generation_id may be given")
    ids = request.args.getlist("generation_id")
    if not 1 <= len(ids) <= schemas.MAX_GENERATIONS or not all(re.fullmatch(schemas.UUID, i) for i in ids):
        raise bad_request(f"generation_id: from 1 to {schemas.MAX_GENERATIONS} generation ids (lower-case UUIDs)")
    return jsonify(
        fetches=[
            {
                **{k: v for k, v in row.items() if k != "step"},
                "n": row["step"],
                "generation_id": str(row["generation_id"]),
                "at": row["at"].isoformat(),
            }
            for row in pages().store.fetches(ids)
        ]
    )
