"""RFC 9457 problem details: the one error type every door raises and every client reads."""

from __future__ import annotations

import re
from typing import Any

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://agentfn.dev/problems/"
SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def problem_type(slug: str) -> str:
    """The `type` URL of one of agentfn's own problems. A slug is lower-case words joined by hyphens
    (`daily-tokens`, `bad-url`): one style, so a client matching on types never has to guess."""
    if not SLUG.match(slug):
        raise ValueError(f"a problem slug is lower-case words joined by hyphens, not {slug!r}")
    return PROBLEM_BASE + slug


class ProblemError(Exception):
    """An error a door answers with. `detail` is for people; it never carries stored text or secrets."""

    def __init__(self, status: int, title: str, detail: str = "", *, type: str = "about:blank", **extra: Any):
        super().__init__(f"{status} {title}")
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.extra = extra

    def to_dict(self) -> dict[str, Any]:
        body = {"type": self.type, "title": self.title, "status": self.status}
        if self.detail:
            body["detail"] = self.detail
        body.update(self.extra)
        return body


def bad_request(detail: str, **extra: Any) -> ProblemError:
    return ProblemError(400, "Bad Request", detail, **extra)


def unprocessable(detail: str, **extra: Any) -> ProblemError:
    return ProblemError(422, "Unprocessable Content", detail, **extra)


def not_found(detail: str = "no such resource") -> ProblemError:
    return ProblemError(404, "Not Found", detail)


def unauthorized(detail: str) -> ProblemError:
    return ProblemError(401, "Unauthorized", detail)


def forbidden(detail: str) -> ProblemError:
    return ProblemError(403, "Forbidden", detail)


def unavailable(detail: str) -> ProblemError:
    return ProblemError(503, "Service Unavailable", detail)
