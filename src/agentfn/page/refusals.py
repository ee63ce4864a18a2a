"""The ways opening a page can be refused: one problem `type` per class, each with a fixed status.

A refusal's `detail` tells a model (and a person) what to do next. It never quotes an address the
host resolved to, the page's path or query, or anything the page said.
"""

from __future__ import annotations

from typing import Any

from agentfn.shared.problems import ProblemError, problem_type

# kind -> (status, title). Refusals of the caller's request are 4xx; the page's own failures 502/504.
KINDS: dict[str, tuple[int, str]] = {
    "bad-url": (422, "Bad URL"),
    "blocked-address": (403, "Blocked address"),
    "dns-failure": (422, "DNS failure"),
    "too-many-redirects": (422, "Too many redirects"),
    "too-large": (422, "Page too large"),
    "timeout": (504, "Page timed out"),
    "unsupported-type": (422, "Unsupported content type"),
    "budget-spent": (429, "Page budget spent"),
    "upstream-error": (502, "Upstream error"),
    "bad-offset": (422, "Offset past the end"),
}


class Refusal(Exception):
    """A page that will not be opened, and why. `status` overrides the kind's usual status."""

    def __init__(self, kind: str, detail: str, *, status: int | None = None, **extra: Any):
        super().__init__(kind)
        self.kind = kind
        self.detail = detail
        self.status = status or KINDS[kind][0]
        self.extra = extra

    def problem(self) -> ProblemError:
        return ProblemError(self.status, KINDS[self.kind][1], self.detail, type=problem_type(self.kind), **self.extra)
