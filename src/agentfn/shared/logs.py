"""Structured JSON logs. Records carry ids, routes, statuses and timings; never tokens or entry text."""

from __future__ import annotations

import json
import logging
import sys
import time

# Fields a record may carry besides the message; anything else passed in `extra` is dropped.
FIELDS = (
    "request_id",
    "method",
    "route",
    "status",
    "ms",
    "subject_hash",
    "event",
    "error_type",
    "where",
    "part",
    "count",
    "model",
    "generation_id",
    "agent",
    "outcome",
    "timing",  # where a turn's time went: ms, engine_ms, tools_ms
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            # Start-up and worker failures; request failures are logged by the app without their message.
            out["exc"] = self.formatException(record.exc_info)
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        return json.dumps(out, ensure_ascii=False)


def configure(level: str = "INFO") -> None:
    """Route every logger through one JSON handler on stderr (what a container platform collects)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
