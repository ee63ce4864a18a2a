"""The workbench: the web page where a person talks to an agent, keeps their memory and calls their tools,
and where an admin audits grants.

`gunicorn -c python:agentfn.shared.gunicorn_conf 'agentfn.workbench.app:create_app()'`. It serves files
only: the page (`static/`, plain HTML, CSS and one script, no build step) and the sign-in settings the
page reads. The page signs in at the OIDC issuer (authorization code with PKCE, a public client), keeps
the access token in its own memory and sends it only to the platform's doors on the same site, which
verify it as for any other caller. No door here needs a token, and none sees one.

Configuration: `WorkbenchSettings` (agentfn.workbench.settings; docs/configuration.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from flask import Blueprint, Flask, Response, current_app, jsonify, send_from_directory

from agentfn.shared import app as http
from agentfn.shared.problems import ProblemError

from .settings import WorkbenchSettings

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css", "icon.svg": "image/svg+xml"}

bp = Blueprint("workbench", __name__)


# --- the doors ---------------------------------------------------------------------------------------------


@bp.get("/")
def page() -> Response:
    """The page."""
    return send_from_directory(STATIC, "index.html", mimetype="text/html", max_age=0)


@bp.get("/assets/<name>")
def asset(name: str) -> Response:
    """The page's script, style and icon; nothing else is served."""
    if name not in ASSETS:
        raise ProblemError(404, "Not Found", "no such asset")
    return send_from_directory(STATIC, name, mimetype=ASSETS[name], max_age=0)


@bp.get("/workbench.json")
def settings() -> Response:
    """What the page needs to sign in: the issuer, its client id and the scopes; and which groups the admin page is for."""
    return jsonify(current_app.config["WORKBENCH"])


# --- the work: headers that hold the page to its own site ---------------------------------------------------


def policy(issuer: str) -> str:
    """The page's Content-Security-Policy: its own files only, no inline script or style, fetches to this site
    and the issuer's token endpoint, never framed."""
    issuer_origin = "{0.scheme}://{0.netloc}".format(urlsplit(issuer))
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            f"connect-src 'self' {issuer_origin}",
            "form-action 'none'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ]
    )


def protect(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = current_app.config["WORKBENCH_CSP"]
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    response.headers["Cross-Origin-Resource-Policy"] = "same-origin"
    response.headers["Permissions-Policy"] = "camera=(), microphone=(), geolocation=()"
    return response


OPENAPI = {
    "openapi": "3.1.0",
    "info": {"title": "agentfn workbench", "version": "1"},
    "paths": {
        "/": {
            "get": {"summary": "The page", "responses": {"200": {"description": "the page", "content": {"text/html": {}}}}}
        },
        "/assets/{name}": {
            "get": {
                "summary": "The page's script, style and icon",
                "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "the file"},
                    "404": {
                        "description": "no such asset",
                        "content": {"application/problem+json": {"schema": {"type": "object"}}},
                    },
                },
            }
        },
        "/workbench.json": {
            "get": {
                "summary": "Sign-in settings",
                "responses": {
                    "200": {
                        "description": "the issuer, client id and scopes; the groups shown the admin page",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["issuer", "client_id", "scope", "admin_groups"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "issuer": {"type": "string"},
                                        "client_id": {"type": "string"},
                                        "scope": {"type": "string"},
                                        "admin_groups": {"type": "array", "items": {"type": "string"}},
                                    },
                                }
                            }
                        },
                    }
                },
            }
        },
    },
}


def create_app(env: Mapping[str, str] | None = None) -> Flask:
    env = dict(os.environ if env is None else env)
    http.configure_logging(env)
    settings = WorkbenchSettings.from_env(env)
    issuer = settings.issuer or settings.jwt_issuer
    if not issuer or urlsplit(issuer).scheme not in ("http", "https"):
        raise SystemExit("AGENTFN_WORKBENCH_ISSUER (or AGENTFN_JWT_ISSUER) must be the issuer's http(s) URL")
    app = http.create_app(
        "agentfn.workbench",
        openapi=OPENAPI,
        readiness={"page": (STATIC / "index.html").is_file},
        identity=None,
        max_request_bytes=1024,
    )
    app.config["WORKBENCH"] = {
        "issuer": issuer.rstrip("/"),
        "client_id": settings.client_id,
        "scope": settings.scope,
        "admin_groups": list(settings.admin_groups),
    }
    app.config["WORKBENCH_CSP"] = policy(issuer)
    app.register_blueprint(bp)
    app.after_request(protect)
    return app
