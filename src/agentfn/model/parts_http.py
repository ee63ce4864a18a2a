"""HTTP to the other parts (tools, the page fetcher, memory): JSON in, JSON out, with the token given (exchanged).

No retries (a turn has a deadline), no redirects (a token must not travel on), a timeout on every call,
and a cap on an answer's size. What another part answers with an error is reduced to the fields of a
problem (type, title, status, detail), clipped: our parts never put stored text or secrets in a detail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import urllib3

from agentfn.shared import telemetry

MAX_BYTES = 2 * 1024 * 1024
PROBLEM_FIELDS = ("type", "title", "status", "detail")


class Unreachable(Exception):
    """The part did not answer (refused, reset) or not in time (`timeout` set)."""

    def __init__(self, timeout: bool):
        super().__init__("timeout" if timeout else "unreachable")
        self.timeout = timeout


@dataclass
class Answer:
    status: int
    body: Any  # parsed JSON, or None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def problem(self, part: str) -> dict[str, Any]:
        """The answer as a problem a caller and a model may see: only the problem's own fields, clipped."""
        body = self.body if isinstance(self.body, dict) else {}
        problem = {
            k: body[k] for k in PROBLEM_FIELDS if isinstance(body.get(k), (str, int)) and not isinstance(body.get(k), bool)
        }
        problem["status"] = self.status
        problem.setdefault("title", f"{part} answered HTTP {self.status}")
        for key in ("title", "detail", "type"):
            if isinstance(problem.get(key), str):
                problem[key] = problem[key][:300]
        return problem


class Http:
    def __init__(self, maxsize: int = 16):
        self._pool = urllib3.PoolManager(retries=False, maxsize=maxsize, block=False)

    def request(
        self,
        method: str,
        url: str,
        *,
        token: str | None,
        timeout: float,
        body: Any = None,
        extra_headers: dict[str, str] | None = None,
    ) -> Answer:
        headers = {"Accept": "application/json", **(extra_headers or {})}
        telemetry.inject(headers)  # the turn's trace goes on in the part called (W3C traceparent)
        if token is not None:
            headers["Authorization"] = "Bearer " + token  # exchanged for this part (or, raw forwarding, the caller's)
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode()
            headers["Content-Type"] = "application/json"
        timeout = max(timeout, 0.001)
        try:
            response = self._pool.request(
                method,
                url,
                body=data,
                headers=headers,
                redirect=False,
                preload_content=False,
                timeout=urllib3.Timeout(total=timeout, connect=min(timeout, 3.0)),
            )
        except urllib3.exceptions.NewConnectionError:  # refused or unresolvable (a ConnectTimeoutError subclass)
            raise Unreachable(timeout=False) from None
        except (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError):
            raise Unreachable(timeout=True) from None
        except urllib3.exceptions.HTTPError:
            raise Unreachable(timeout=False) from None
        try:
            raw = response.read(MAX_BYTES + 1, decode_content=True)
        except urllib3.exceptions.ReadTimeoutError:
            raise Unreachable(timeout=True) from None
        except urllib3.exceptions.HTTPError:
            raise Unreachable(timeout=False) from None
        finally:
            response.release_conn()
        if len(raw) > MAX_BYTES:
            return Answer(502, {"title": "the answer is too large"})
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return Answer(response.status, parsed)

    def healthy(self, url: str) -> bool:
        try:
            return self.request("GET", url, token=None, timeout=1.0).status == 200
        except Unreachable:
            return False
