"""`/mcp`: the MCP-enabled tools over Streamable HTTP, with the official `mcp` SDK's server (T6).

The SDK's low-level `Server`, stateless and answering in JSON (each request stands alone: scale-to-zero),
is an ASGI app; `a2wsgi` mounts it in the WSGI app gunicorn serves. The SDK's session manager must be
running for it to answer, which a Starlette lifespan would do and a2wsgi does not: it runs on an event
loop of this module's own, in a thread, and that loop is handed to the middleware.

The handlers (`mcp_handlers`, module-level) read the loop's own tool table (`direct_calls.listing` /
`direct_calls.call`): no second table, so a tool reads the same in an agent step, in the record and to an MCP client.

`/mcp` is an OAuth 2.1 resource server as the MCP authorization spec has it: it takes only tokens whose
audience is its own resource URL (`AGENTFN_MCP_RESOURCE`, what an MCP client names as RFC 8707 `resource`),
never the gateway's `agentfn` token; it answers 401 with `WWW-Authenticate: Bearer resource_metadata=...`,
and its RFC 9728 metadata (`protected_resource`) names the issuer to get such a token from. The bearer
token is checked by `CallerTokens`, a `TokenVerifier` over the same JWT check every door uses; calls run
as that caller (each part called gets a token exchanged for it, never this one).
Building all this imports the SDK (a second or two), so it is built on the first request or by the
warm-up thread after start, never on the way to ready.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from flask import Blueprint, jsonify

from agentfn.shared.identity import Verifier

from .services import Services

METADATA = "/.well-known/oauth-protected-resource"


def protected_resource(resource: str, issuers: list[str]) -> Blueprint:
    """RFC 9728 metadata of `/mcp`, at the well-known path and its path-suffixed form (section 3.1)."""
    bp = Blueprint("protected_resource", __name__)

    @bp.get(METADATA)
    @bp.get(METADATA + "/mcp")
    def metadata():
        """OAuth protected-resource metadata of /mcp: its resource URL and the issuer of its tokens."""
        response = jsonify(
            resource=resource,
            authorization_servers=issuers,
            bearer_methods_supported=["header"],
            resource_name="agentfn MCP tools",
        )
        response.headers["Cache-Control"] = "public, max-age=3600"
        return response

    return bp


def build(
    services: Services,
    verifier: Verifier,
    resource: str,
    allowed_hosts: list[str],
    allowed_origins: list[str],
    max_body: int,
):
    """The ASGI app and the loop its session manager runs on (started here, in a daemon thread)."""
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.lowlevel.server import Server
    from mcp.server.transport_security import TransportSecuritySettings

    from .mcp_handlers import CallerTokens, call_tool, list_tools, serving

    logging.getLogger("mcp").setLevel(logging.WARNING)  # its info lines may name sessions; ours say what matters

    server = Server(
        "agentfn",
        version="1.0.0",
        lifespan=serving(services),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        instructions="The platform's reviewed read tools; each call runs as the caller of the token.",
    )
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins
    )
    app = server.streamable_http_app(
        streamable_http_path="/",
        stateless_http=True,
        json_response=True,
        transport_security=security,
        max_request_body_size=max_body,
        token_verifier=CallerTokens(verifier),
        # Only a resource server: no OAuth routes are served; the issuer named is the one callers' tokens come from.
        # The audience is checked by CallerTokens (the JWT's `aud`), so the SDK need not compare `resource`.
        auth=AuthSettings(issuer_url=verifier.trust.issuer, resource_server_url=resource, validate_token_resource=False),
    )
    loop = asyncio.new_event_loop()
    running = threading.Event()

    async def keep_running():
        async with server.session_manager.run():
            running.set()
            await asyncio.Event().wait()

    threading.Thread(target=loop.run_until_complete, args=(keep_running(),), name="mcp-loop", daemon=True).start()
    if not running.wait(10):
        raise RuntimeError("the MCP session manager did not start")
    return app, loop


class LazyMCP:
    """A WSGI app that builds the MCP mount once, on first use or when `warm()` asks."""

    def __init__(self, factory: Callable[[], tuple]):
        self._factory, self._wsgi, self._lock = factory, None, threading.Lock()

    def warm(self) -> None:
        self._get()

    def _get(self):
        with self._lock:
            if self._wsgi is None:
                from a2wsgi import ASGIMiddleware

                app, loop = self._factory()
                self._wsgi = ASGIMiddleware(app, loop=loop)
            return self._wsgi

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") != "POST":
            # Stateless and JSON-only: no session to delete, and a GET would hold a worker thread open on an
            # event stream that never carries anything. The spec lets a server answer 405 to both.
            body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Method Not Allowed: POST only"}}'
            start_response(
                "405 Method Not Allowed",
                [("Content-Type", "application/json"), ("Allow", "POST"), ("Content-Length", str(len(body)))],
            )
            return [body]
        # Mounted at /mcp, a request for /mcp itself arrives with an empty path: serve it there rather
        # than let Starlette redirect to /mcp/ (a redirect a client or a gateway may not follow).
        environ["PATH_INFO"] = environ.get("PATH_INFO") or "/"
        return self._get()(environ, start_response)
