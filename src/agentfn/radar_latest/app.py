"""radar_latest: the Radar's latest published digests the caller may read.

`gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.radar_latest.app:create_app()'`. The service behind it
and its contract: `functions/radar_latest/upstream.md`; its test double: `agentfn.devstack.radar_latest`.

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

SERVICE = "Radar"
DEFAULT_COUNT, MAX_TITLE, MAX_SUMMARY, MAX_URL = 3, 160, 300, 500
DAY = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ]")
LINK = re.compile(r"^https?://[^\s/?#]+(?:[/?#]\S*)?$")  # unambiguous: linear

DIGEST = {
    "type": "object",
    "required": ["title", "date", "url", "summary"],
    "properties": {
        "title": {"type": "string", "maxLength": MAX_TITLE},
        "date": {"type": "string", "format": "date"},
        "url": {"type": "string", "maxLength": MAX_URL},
        "summary": {"type": "string", "maxLength": MAX_SUMMARY},
    },
}
CONTENT = {
    "type": "object",
    "required": ["digests", "count"],
    "properties": {
        "digests": {"type": "array", "maxItems": 10, "items": DIGEST},
        "count": {"type": "integer", "minimum": 0},
    },
}


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    return read_tool_app(
        "agentfn.radar_latest",
        env,
        service=SERVICE,
        url_variable="AGENTFN_RADAR_LATEST_UPSTREAM_URL",
        summarise=summarise,
        content_schema=CONTENT,
    )


def summarise(upstream: Upstream, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
    """The newest `count` digests the caller may read: title, day, link and the start of the summary."""
    count = int(arguments.get("count", DEFAULT_COUNT))  # JSON Schema calls 2.0 an integer; the Radar does not
    answer = upstream.get_json("/v1/digests", caller, {"limit": str(count)})
    if not isinstance(answer, dict) or not isinstance(answer.get("digests"), list):
        raise outside_contract(SERVICE, "no digests list")
    digests = [d for d in map(_digest, answer["digests"][:50]) if d][:count]
    return {"digests": digests, "count": len(digests)}


def _digest(item: Any) -> dict | None:
    if not isinstance(item, dict):
        return None
    title, published, url = item.get("title"), item.get("published_at"), item.get("url")
    if not (isinstance(title, str) and title.strip() and isinstance(published, str) and isinstance(url, str)):
        return None
    day = DAY.match(published)
    if not day or len(url) > MAX_URL or not LINK.match(url):
        return None
    summary = item.get("summary")
    return {
        "title": clip(title, MAX_TITLE),
        "date": day.group(1),
        "url": url,
        "summary": clip(summary, MAX_SUMMARY) if isinstance(summary, str) else "",
    }
