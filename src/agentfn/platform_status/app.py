"""platform_status: the arena's snapshot, summarised, as the caller sees it.

`gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.platform_status.app:create_app()'`. The service behind
it and its contract: `functions/platform_status/upstream.md`; its test double: `agentfn.devstack.platform_status`.

Configuration: `ReadToolSettings` (agentfn.shared.read_tool; docs/configuration.md), and identity's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from flask import Flask

from agentfn.shared import app as http
from agentfn.shared.identity import Caller
from agentfn.shared.read_tool import read_tool_app
from agentfn.shared.upstream import Upstream, clip, outside_contract

SERVICE = "arena status"
STATES = ("up", "degraded", "down")
MAX_TEXT, MAX_ATTENTION, MAX_INCIDENTS, MAX_SERVICES = 400, 8, 5, 200

figure = {"type": "integer", "minimum": 0}
CONTENT = {
    "type": "object",
    "required": ["text", "taken_at", "figures", "attention", "incidents"],
    "properties": {
        "text": {"type": "string", "maxLength": MAX_TEXT},
        "taken_at": {"type": ["string", "null"]},
        "figures": {
            "type": "object",
            "properties": {
                k: figure for k in ("services", "up", "degraded", "down", "queue_waiting", "queue_running", "open_incidents")
            },
        },
        "attention": {
            "type": "array",
            "maxItems": MAX_ATTENTION,
            "items": {
                "type": "object",
                "required": ["name", "state"],
                "properties": {
                    "name": {"type": "string"},
                    "state": {"enum": list(STATES)},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
        "incidents": {
            "type": "array",
            "maxItems": MAX_INCIDENTS,
            "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "since": {"type": ["string", "null"]},
                    "service": {"type": ["string", "null"]},
                },
            },
        },
    },
}


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    return read_tool_app(
        "agentfn.platform_status",
        env,
        service=SERVICE,
        url_variable="AGENTFN_PLATFORM_STATUS_UPSTREAM_URL",
        summarise=summarise,
        content_schema=CONTENT,
    )


def summarise(upstream: Upstream, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
    """The snapshot the caller may see, cut to a short text and the figures that matter."""
    snapshot = upstream.get_json("/v1/snapshot", caller)
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("services"), list):
        raise outside_contract(SERVICE, "no services list")
    services = [s for s in map(_service, snapshot["services"][:MAX_SERVICES]) if s]
    incidents = [i for i in map(_incident, _list(snapshot.get("incidents"))) if i]
    queue = snapshot.get("queue") if isinstance(snapshot.get("queue"), dict) else {}
    counts = {state: sum(s["state"] == state for s in services) for state in STATES}
    figures = {
        "services": len(services),
        **counts,
        "queue_waiting": _count(queue.get("waiting")),
        "queue_running": _count(queue.get("running")),
        "open_incidents": len(incidents),
    }

    wanted = arguments.get("service")
    if wanted is not None:
        services = [s for s in services if s["name"] == wanted]
        incidents = [i for i in incidents if i["service"] == wanted]
        if not services:
            text = f"No service named {wanted} is visible to you."
        else:
            one = services[0]
            text = f"{one['name']} is {one['state']}" + (f": {one['note']}" if one["note"] else "") + "."
        attention = services
    else:
        attention = [s for s in services if s["state"] != "up"]
        text = _overview(figures, attention)
    if incidents:
        text += (
            f" {len(incidents)} open incident{'s' if len(incidents) != 1 else ''}: "
            + "; ".join(i["title"] for i in incidents[:2])
            + "."
        )
    return {
        "text": clip(text, MAX_TEXT),
        "taken_at": _stamp(snapshot.get("taken_at")),
        "figures": figures,
        "attention": attention[:MAX_ATTENTION],
        "incidents": incidents[:MAX_INCIDENTS],
    }


def _overview(figures: dict[str, int], attention: list[dict]) -> str:
    if not figures["services"]:
        return "No services are visible to you."
    text = f"{figures['up']} of {figures['services']} services up"
    for state in ("degraded", "down"):
        names = [s["name"] for s in attention if s["state"] == state]
        if names:
            text += f"; {state}: {', '.join(names[:4])}" + (" and others" if len(names) > 4 else "")
    return text + f". Queue: {figures['queue_waiting']} waiting, {figures['queue_running']} running."


def _service(item: Any) -> dict | None:
    if not isinstance(item, dict) or item.get("state") not in STATES or not isinstance(item.get("name"), str):
        return None
    note = item.get("note")
    return {
        "name": clip(item["name"], 64),
        "state": item["state"],
        "note": clip(note, 160) if isinstance(note, str) and note.strip() else None,
    }


def _incident(item: Any) -> dict | None:
    if not isinstance(item, dict) or not isinstance(item.get("title"), str):
        return None
    service = item.get("service")
    return {
        "title": clip(item["title"], 120),
        "since": _stamp(item.get("since")),
        "service": clip(service, 64) if isinstance(service, str) else None,
    }


def _list(value: Any) -> list:
    return value[:50] if isinstance(value, list) else []


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _stamp(value: Any) -> str | None:
    return clip(value, 40) if isinstance(value, str) and value else None
