"""Memory's doors: entries CRUD and recall for callers, WriteEpisode for services."""

from __future__ import annotations

import logging
import time

from flask import Blueprint, current_app, g, jsonify, request

from agentfn.shared import telemetry
from agentfn.shared.identity import caller_required, service_required
from agentfn.shared.problems import ProblemError, bad_request, problem_type
from agentfn.shared.pseudonym import subject_hash
from agentfn.shared.validation import Schema, json_body

from . import schemas
from .memory import Memory, parse_id
from .store import Once

bp = Blueprint("memory", __name__)
log = logging.getLogger("agentfn.memory")

CREATE, CORRECT, RECALL, EPISODE, FORGET_ALL = (
    Schema(s) for s in (schemas.CREATE, schemas.CORRECT, schemas.RECALL, schemas.EPISODE, schemas.FORGET_ALL)
)
CONFIRM = (
    f"confirm: forgetting everything deletes every entry you have, of every kind, and cannot be undone; send "
    f'{{"confirm": "{schemas.FORGET_EVERYTHING}"}} to do it. Nothing was forgotten'
)


OWN_TOKEN_ONLY = (
    "this door takes the person's own token: a token exchanged for memory may recall, keep a note and forget one entry"
)


def own_token() -> None:
    """Listing, correcting and forgetting everything take the person's own token (the gateway's). A token the model
    function exchanged for memory (it names an actor) opens only what its loop needs: recall, one write and one
    forget per token (`once`), so one leaked from a turn cannot read out or erase a person's memory."""
    if g.caller.actor is not None:
        raise ProblemError(403, "Forbidden", OWN_TOKEN_ONLY, type=problem_type("own-token-only"))


def once(use: str) -> Once | None:
    """An exchanged token keeps one note and forgets one entry (`use`), counted by its `jti` across every memory
    process until it expires: one that leaks from a turn cannot erase entry after entry. The person's own: None."""
    caller = g.caller
    if caller.actor is None:
        return None
    if caller.token_id is None or caller.expires is None:
        raise ProblemError(
            403,
            "Forbidden",
            "a token exchanged for memory names itself (`jti`) and its expiry to keep a note or forget one",
            type=problem_type("exchanged-token-spent"),
        )
    leeway = current_app.extensions["agentfn.identity"].caller.trust.leeway
    return Once(caller.token_id, use, caller.expires + leeway)


def memory() -> Memory:
    return current_app.extensions["agentfn.memory"]


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise bad_request(f"{name}: must be an integer from {low} to {high}")
    return int(raw)


@bp.get("/v1/entries")
@caller_required
def list_entries():
    """The caller's entries, newest first, optionally of one kind."""
    own_token()
    unknown = set(request.args) - {"kind", "limit", "offset"}
    if unknown:
        raise bad_request(f"unknown query parameter {', '.join(sorted(unknown))}")
    kind = request.args.get("kind")
    if kind is not None and kind not in schemas.KINDS:
        raise bad_request(f"kind: must be one of {', '.join(schemas.KINDS)}")
    limit, offset = _int_arg("limit", 200, 1, 1000), _int_arg("offset", 0, 0, 10**9)
    return jsonify(entries=memory().list(g.caller.subject, kind, limit, offset))


@bp.post("/v1/entries")
@caller_required
def create_entry():
    """Keep a fact or a preference for the caller: 201, or 200 with the entry that already says this note."""
    body = json_body(CREATE)
    with telemetry.span("update_memory", {"gen_ai.operation.name": "update_memory", "agentfn.memory.kind": body["kind"]}):
        entry, existing = memory().create(g.caller.subject, body["kind"], body["text"], body["source"], once("write"))
    return jsonify(entry | {"existing": existing}), 200 if existing else 201


@bp.delete("/v1/entries")
@caller_required
def forget_all_entries():
    """Forget every entry of the caller, once they confirm it with the phrase; answers a receipt, no text."""
    own_token()
    confirmed()
    with telemetry.span("delete_memory", {"gen_ai.operation.name": "delete_memory"}) as span:
        receipt = memory().forget_all(g.caller.subject)
        span.attrs({"agentfn.memory.entries": receipt["total"]})
    # Erasing a subject is an event operators are asked about: who (hashed), how many, when; never what.
    log.info(
        "forgot everything",
        extra={
            "event": "forget_all",
            "subject_hash": subject_hash(g.caller.subject),
            "count": receipt["total"],
            "request_id": g.get("request_id"),
        },
    )
    return jsonify(receipt)


def confirmed() -> None:
    """The body is exactly {"confirm": "forget everything"}; a missing body, field or other phrase is a 422."""
    problem = ProblemError(422, "Unprocessable Content", CONFIRM, type=problem_type("confirm-forget-all"))
    if not request.get_data(cache=True):
        raise problem
    try:
        json_body(FORGET_ALL)
    except ProblemError as refused:
        if refused.status != 422:
            raise
        raise problem from None


@bp.patch("/v1/entries/<entry_id>")
@caller_required
def correct_entry(entry_id: str):
    """Correct the text or source of one of the caller's entries; it is embedded again."""
    own_token()
    body = json_body(CORRECT)
    with telemetry.span("update_memory", {"gen_ai.operation.name": "update_memory"}):
        entry = memory().correct(g.caller.subject, parse_id(entry_id), body.get("text"), body.get("source"))
    return jsonify(entry)


@bp.delete("/v1/entries/<entry_id>")
@caller_required
def forget_entry(entry_id: str):
    """Forget one of the caller's entries: the row and its vector are deleted."""
    with telemetry.span("delete_memory", {"gen_ai.operation.name": "delete_memory", "agentfn.memory.entries": 1}):
        memory().forget(g.caller.subject, parse_id(entry_id), once("forget"))
    return "", 204


@bp.post("/v1/recall")
@caller_required
def recall():
    """The caller's nearest entries to the query, above the model's threshold, within the caps."""
    body = json_body(RECALL)
    began = time.perf_counter()
    with telemetry.span("search_memory", {"gen_ai.operation.name": "search_memory"}) as span:
        found = memory().recall(
            g.caller.subject,
            body["query"],
            body.get("kinds"),
            body.get("limit"),
            body.get("max_tokens"),
            body.get("preferences", 0),
        )
        span.attrs({"agentfn.memory.entries": len(found["entries"])})
    telemetry.record("agentfn.recall.duration", time.perf_counter() - began, {})
    telemetry.record("agentfn.recall.entries", len(found["entries"]), {})
    return jsonify(found)


@bp.post("/internal/v1/episodes")
@service_required
def write_episode():
    """WriteEpisode: a trusted service keeps a session's summary for a subject."""
    body = json_body(EPISODE)
    with telemetry.span(
        "update_memory",
        {
            "gen_ai.operation.name": "update_memory",
            "agentfn.memory.kind": "episode",
            "user.hash": subject_hash(body["subject"]),
        },
    ):
        episode = memory().write_episode(body["subject"], body["text"], body.get("session_id"))
    return jsonify(episode), 201
