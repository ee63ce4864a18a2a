"""The platform service behind a read tool, called as the caller.

A read tool exchanges the caller's token again for the audience of the service behind it
(`AGENTFN_<TOOL>_UPSTREAM_AUDIENCE`, default `agentfn:upstream:<tool>`; `exchange`), so the service never
receives a token another part would take. The service decides what the caller may see; its refusals and
failures become problems here. It is called with the standard library's http.client, which the app has
loaded already, rather than another HTTP stack (a read tool's cold start is paid on a user's turn).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from . import telemetry
from .exchange import ExchangeFailed, TokenExchange
from .identity import Caller
from .problems import ProblemError, problem_type


def not_allowed(service: str) -> ProblemError:
    return ProblemError(
        403, "Forbidden", f"the {service} service does not allow this caller", type=problem_type("not-allowed")
    )


def upstream_problem(status: int, detail: str) -> ProblemError:
    title = {502: "Bad Gateway", 504: "Gateway Timeout"}[status]
    return ProblemError(status, title, detail, type=problem_type("upstream"))


class Upstream:
    """The platform service behind a read tool, called as the caller: a token exchanged for it and nothing else.

    One connection per call, no retries (the caller's turn has a deadline), no redirects (http.client
    follows none, so the token travels nowhere else), a timeout on connect and on every read, and a cap
    on the answer's size. What the service says goes into no problem.
    """

    MAX_BYTES = 1024 * 1024

    def __init__(self, service: str, base_url: str, timeout: float, tokens: TokenExchange | None = None, audience: str = ""):
        parts = urllib.parse.urlsplit(base_url)
        self.tokens = tokens or TokenExchange(mode="raw", url="", token_file="")
        self.audience = audience
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RuntimeError(f"the {service} upstream URL must be an http(s) URL")
        self.service, self.timeout = service, timeout
        self._https, self._host, self._port = parts.scheme == "https", parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/")

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def get_json(self, path: str, caller: Caller, fields: Mapping[str, Any] | None = None) -> Any:
        """GET `path` as the caller; the JSON answer, or the problem that explains why not."""
        target = self._prefix + path + ("?" + urllib.parse.urlencode(fields) if fields else "")
        try:
            token = self.tokens.token_for(caller, self.audience, self.timeout)
        except ExchangeFailed as failed:
            if failed.status in (401, 403):
                raise not_allowed(self.service) from None
            raise upstream_problem(
                504 if failed.status == 504 else 502, f"no token for the {self.service} service: {failed.detail}"
            ) from None
        headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
        telemetry.inject(headers)  # the platform service's own traces join the turn's
        conn = self._connection(self.timeout)
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
            status = response.status
            if status in (401, 403):
                raise not_allowed(self.service)
            if status >= 500:
                raise upstream_problem(502, f"the {self.service} service failed (HTTP {status})")
            if status != 200:
                raise upstream_problem(502, f"the {self.service} service answered outside its contract (HTTP {status})")
            data = response.read(self.MAX_BYTES + 1)
        except TimeoutError:
            raise upstream_problem(504, f"the {self.service} service did not answer within {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException):  # refused, reset, unresolvable, broken off
            raise upstream_problem(502, f"the {self.service} service is not answering") from None
        finally:
            conn.close()
        if len(data) > self.MAX_BYTES:
            raise upstream_problem(502, f"the {self.service} service's answer is larger than {self.MAX_BYTES} bytes")
        try:
            return json.loads(data)
        except ValueError:
            raise upstream_problem(502, f"the {self.service} service's answer is not JSON") from None

    def healthy(self) -> bool:
        """Readiness: the service answers its (unauthenticated) health door."""
        conn = self._connection(min(self.timeout, 1.0))
        try:
            conn.request("GET", self._prefix + "/healthz")
            return conn.getresponse().status == 200
        finally:
            conn.close()


def outside_contract(service: str, what: str) -> ProblemError:
    return upstream_problem(502, f"the {service} service answered outside its contract ({what})")


def clip(value: Any, limit: int) -> str:
    """A string of at most `limit` characters, whatever the service sent (ellipsis when cut)."""
    text = " ".join(str(value).split()) if value is not None else ""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
