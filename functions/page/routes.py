"""The page fetcher's door: POST /v1/open, for callers (the model function forwards them)."""

from __future__ import annotations

from agentfn.shared.identity import caller_required
from agentfn.shared.validation import Schema, json_body
from flask import Blueprint, current_app, g, jsonify

from . import schemas
from .pages import Pages

bp = Blueprint("page", __name__)

OPEN = Schema(schemas.OPEN)


def pages() -> Pages:
    return current_app.extensions["agentfn.page"]


@bp.post("/v1/open")
@caller_required
def open_page():
    """A window of a public page's readable text, with the links in it numbered."""
    body = json_body(OPEN)
    window = body.get("window", current_app.config["AGENTFN_PAGE_WINDOW"])
    return jsonify(pages().open(g.caller.subject, body["url"], body.get("offset", 0), window, g.get("request_id")))
