"""RFC 9457 problem details: the one error type every door raises and every client reads."""

from __future__ import annotations

from typing import Any

PROBLEM_JSON = "application/problem+json"


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
