"""The dev gateway: one port in front of the local platform that routes only the public doors.

    gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.cli.gateway:create_app()'

It stands where the platform's gateway (Gateway API routes in a cluster) stands: memory's `/v1/entries*`
and `/v1/recall`, the model function's `/v1/agents*`, `/v1/tools*`, `/v1/admin*` (it lets only admins through),
`/mcp` and its protected-resource metadata (RFC 9728, `/.well-known/oauth-protected-resource[/mcp]`), and the
workbench page at the site root (`/`, its `/assets/*` and `/workbench.json`). Every other path is 404
whatever the method, `/internal/*` above all, and the page fetcher and the tool functions are never
reached. It checks no token itself: memory and the model function verify the caller's JWT, which passes
through unchanged. Responses stream through as they come, so a turn's events arrive one by one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from urllib.parse import quote

import requests
from werkzeug.datastructures import Headers
from werkzeug.http import is_hop_by_hop_header
from werkzeug.wrappers import Request, Response

from agentfn.shared.problems import PROBLEM_JSON, ProblemError

from .settings import GatewaySettings

# The public doors, matched against the whole decoded path: path -> upstream.
ROUTES = (
    (re.compile(r"/v1/entries(/[^/]+)?"), "memory"),
    (re.compile(r"/v1/recall"), "memory"),
    (re.compile(r"/v1/agents(/[^/]+)*"), "model"),
    (re.compile(r"/v1/tools(/[^/]+)*"), "model"),
    (re.compile(r"/v1/admin(/[^/]+)*"), "model"),
    (re.compile(r"/mcp/?"), "model"),
    (re.compile(r"/\.well-known/oauth-protected-resource(/mcp)?"), "model"),
    (re.compile(r"/|/assets/[^/]+|/workbench\.json"), "workbench"),
)
MAX_BODY = 1024 * 1024  # larger than any door takes: the function itself answers 413 below this
TIMEOUT = (5, 600)  # connect; read between two chunks (a turn on a small CPU engine pauses long)


def route(path: str) -> str | None:
    """The upstream a path goes to, or None: the one guard of the gateway.

    A dot segment is never routed: `/v1/agents/../../internal/...` must not become `/internal/...` in
    whichever server normalises it.
    """
    if any(segment in (".", "..") for segment in path.split("/")):
        return None
    for pattern, upstream in ROUTES:
        if pattern.fullmatch(path):
            return upstream
    return None


def problem(status: int, title: str, detail: str) -> Response:
    return Response(json.dumps(ProblemError(status, title, detail).to_dict()), status=status, mimetype=PROBLEM_JSON)


class Gateway:
    def __init__(self, upstreams: Mapping[str, str]):
        self.upstreams = {name: url.rstrip("/") for name, url in upstreams.items()}
        self.http = requests.Session()
        self.http.trust_env = False  # never a proxy from the environment between the gateway and the parts

    def __call__(self, environ, start_response):
        return self.respond(Request(environ))(environ, start_response)

    def respond(self, request: Request) -> Response:
        upstream = route(request.path)
        if upstream not in self.upstreams:
            return problem(404, "Not Found", "no such door")
        if (request.content_length or 0) > MAX_BODY:
            return problem(413, "Content Too Large", f"the body is larger than {MAX_BODY} bytes")
        headers = {
            k: v
            for k, v in request.headers.items()
            if not is_hop_by_hop_header(k) and k.lower() not in ("host", "content-length")
        }
        url = self.upstreams[upstream] + quote(request.path, safe="/:@!$&'()*+,;=")
        try:
            answer = self.http.request(
                request.method,
                url,
                params=request.query_string or None,
                headers=headers,
                data=request.get_data(),
                stream=True,
                allow_redirects=False,
                timeout=TIMEOUT,
            )
        except requests.RequestException:
            return problem(502, "Bad Gateway", f"{upstream} is not answering")
        kept = Headers(
            [(k, v) for k, v in answer.raw.headers.items() if not is_hop_by_hop_header(k) and k.lower() != "content-length"]
        )
        return Response(relay(answer), status=answer.status_code, headers=kept, direct_passthrough=True)


def relay(answer: requests.Response) -> Iterator[bytes]:
    """The upstream's body as it arrives (chunk by chunk, not buffered to a size)."""
    try:
        yield from answer.raw.stream(None, decode_content=False)
    finally:
        answer.close()


def create_app(env: Mapping[str, str] | None = None) -> Gateway:
    settings = GatewaySettings.from_env(env)
    upstreams = {"memory": settings.memory_url, "model": settings.model_url}
    if settings.workbench_url:  # without it, the site root is 404 like any other path
        upstreams["workbench"] = settings.workbench_url
    return Gateway(upstreams)
