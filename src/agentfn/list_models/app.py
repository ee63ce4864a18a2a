"""list_models: the model tiers the caller may use.

`gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.list_models.app:create_app()'`. The service behind it
and its contract: `functions/list_models/upstream.md`; its test double: `agentfn.devstack.list_models`.

Configuration: `ReadToolSettings` (agentfn.shared.read_tool; docs/configuration.md), and identity's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from flask import Flask

from agentfn.shared import app as http
from agentfn.shared.identity import Caller
from agentfn.shared.read_tool import read_tool_app
from agentfn.shared.upstream import Upstream, clip, outside_contract

SERVICE = "model"
MAX_TIERS = 20
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")

TIER = {
    "type": "object",
    "required": ["name", "engine", "context_tokens", "deadline_seconds", "embeds"],
    "properties": {
        "name": {"type": "string"},
        "engine": {"type": "string"},
        "model": {"type": ["string", "null"]},
        "context_tokens": {"type": "integer", "minimum": 1},
        "deadline_seconds": {"type": "number", "minimum": 0},
        "embeds": {"type": "boolean"},
        "embedding_model": {"type": ["string", "null"]},
    },
}
CONTENT = {
    "type": "object",
    "required": ["tiers", "count"],
    "properties": {
        "tiers": {"type": "array", "maxItems": MAX_TIERS, "items": TIER},
        "count": {"type": "integer", "minimum": 0},
    },
}


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    return read_tool_app(
        "agentfn.list_models",
        env,
        service=SERVICE,
        url_variable="AGENTFN_LIST_MODELS_UPSTREAM_URL",
        summarise=summarise,
        content_schema=CONTENT,
    )


def summarise(upstream: Upstream, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
    """The tiers the caller may use, each cut to the figures a model needs to choose one."""
    answer = upstream.get_json("/v1/tiers", caller)
    if not isinstance(answer, dict) or not isinstance(answer.get("tiers"), list):
        raise outside_contract(SERVICE, "no tiers list")
    tiers = [t for t in map(_tier, answer["tiers"][:200]) if t]
    if "embeds" in arguments:
        tiers = [t for t in tiers if t["embeds"] is arguments["embeds"]]
    tiers = tiers[:MAX_TIERS]
    return {"tiers": tiers, "count": len(tiers)}


def _tier(item: Any) -> dict | None:
    if not isinstance(item, dict):
        return None
    name, engine, embeds = item.get("name"), item.get("engine"), item.get("embeds")
    context, deadline = item.get("context_tokens"), item.get("deadline_seconds")
    if not (
        isinstance(name, str)
        and NAME.match(name)
        and isinstance(engine, str)
        and engine.strip()
        and isinstance(embeds, bool)
        and _positive(context, int)
        and _positive(deadline, (int, float))
    ):
        return None
    return {
        "name": name,
        "engine": clip(engine, 40),
        "model": _text(item.get("model")),
        "context_tokens": context,
        "deadline_seconds": deadline,
        "embeds": embeds,
        "embedding_model": _text(item.get("embedding_model")) if embeds else None,
    }


def _positive(value: Any, kind) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool) and value > 0


def _text(value: Any) -> str | None:
    return clip(value, 80) if isinstance(value, str) and value.strip() else None
