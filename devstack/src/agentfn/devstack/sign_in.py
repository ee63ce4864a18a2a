"""The dev issuer's sign-in: OAuth 2.1 / OpenID Connect authorization code with PKCE (S256) for public web clients.

A browser app (the workbench) sends the person to `GET /authorize`; the issuer shows a page where they pick a
subject and groups (a development tool: it signs in anyone, without a password); `POST /authorize` sends the
browser back to the registered redirect URI with a one-time code, `state` and `iss` (RFC 9207); the app redeems
the code at `POST /token` with its PKCE verifier (RFC 7636) for an access token (audience the client's, e.g.
`agentfn`) and, with scope `openid`, an ID token. A cluster's OIDC issuer (Keycloak, Dex, Entra ID) answers the
same requests, so the app signs in with the same code in both places.

The checks are a real authorization server's: the client and its redirect URI (exact match) come first and a
failure there is a page, never a redirect (an open redirector otherwise); every other error goes back to the
client as RFC 6749 4.1.2.1 says. Codes are random, single use, live 60 s, and are bound to the client, the
redirect URI and the code challenge. They are kept in the issuer's process: it runs one worker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

AUTHORIZATION_CODE = "authorization_code"
SCOPES = ("openid", "profile", "groups")
DEV_GROUPS = ("developers", "platform-users", "platform-admins")  # the dev stack's groups, offered as checkboxes
CODE_SECONDS = 60
ACCESS_SECONDS = 3600
MAX_CODES = 10_000  # codes waiting to be redeemed; the oldest go first
MAX_PARAMETER = 512  # state, nonce, login_hint
CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url of a SHA-256, no padding
VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 4.1
GROUP = re.compile(r"[^\s,\x00-\x1f\x7f]{1,100}")
# The authorization request's parameters: each is sent at most once (RFC 6749 3.1).
REQUEST_FIELDS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "nonce",
    "response_mode",
    "prompt",
    "login_hint",
)


@dataclass(frozen=True)
class WebClient:
    """A public client (a browser app): where it may be sent back to, and the audience of its access tokens."""

    client_id: str
    redirect_uris: frozenset[str]
    audience: str

    @property
    def origins(self) -> frozenset[str]:
        """The origins its pages run at: the ones CORS answers."""
        return frozenset(origin(uri) for uri in self.redirect_uris)


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def web_clients_from_env(value: str | None, default_audience: str) -> dict[str, WebClient]:
    """`{"<client_id>": {"redirect_uris": [...], "audience": "agentfn"}}`; a redirect URI that is not an absolute
    http(s) URL without a fragment stops the issuer at start (RFC 6749 3.1.2)."""
    clients = {}
    for client_id, c in json.loads(value or "{}").items():
        uris = c.get("redirect_uris", [])
        for uri in uris:
            parts = urlsplit(uri)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment or parts.username:
                raise ValueError(
                    f"web client {client_id}: {uri!r} is not an absolute http(s) URL without a fragment or user"
                )
        clients[client_id] = WebClient(client_id, frozenset(uris), c.get("audience", default_audience))
    return clients


class PageError(Exception):
    """The client or its redirect URI cannot be trusted: shown to the person, never redirected."""

    def __init__(self, description: str, status: int = 400):
        super().__init__(description)
        self.description, self.status = description, status


class RedirectError(Exception):
    """An error sent back to the client's redirect URI (RFC 6749 4.1.2.1)."""

    def __init__(self, error: str, description: str):
        super().__init__(description)
        self.error, self.description = error, description


class GrantError(Exception):
    """A token request refused (RFC 6749 5.2)."""

    def __init__(self, error: str, description: str, status: int = 400):
        super().__init__(description)
        self.error, self.description, self.status = error, description, status


@dataclass(frozen=True)
class AuthorizationRequest:
    client: WebClient
    redirect_uri: str
    state: str | None
    code_challenge: str
    scope: tuple[str, ...]
    nonce: str | None
    login_hint: str | None = None

    def hidden(self) -> dict[str, str]:
        """The request as the form carries it back."""
        fields = {
            "response_type": "code",
            "client_id": self.client.client_id,
            "redirect_uri": self.redirect_uri,
            "scope": " ".join(self.scope),
            "state": self.state,
            "code_challenge": self.code_challenge,
            "code_challenge_method": "S256",
            "nonce": self.nonce,
        }
        return {k: v for k, v in fields.items() if v is not None}


def one(params, name: str) -> str | None:
    """A parameter sent at most once (RFC 6749 3.1); sent twice is a `RedirectError` or, for the client's own
    parameters, a `PageError`."""
    values = params.getlist(name)
    if len(values) > 1:
        if name in ("client_id", "redirect_uri"):
            raise PageError(f"{name} was sent more than once")
        raise RedirectError("invalid_request", f"{name} was sent more than once")
    return values[0] if values else None


def client_of(params, clients: Mapping[str, WebClient]) -> tuple[WebClient, str]:
    """The client and the redirect URI it registered, or a `PageError`."""
    client_id, redirect_uri = one(params, "client_id"), one(params, "redirect_uri")
    client = clients.get(client_id or "")
    if client is None:
        raise PageError("the application asking you to sign in is not registered here (unknown client_id)")
    if redirect_uri not in client.redirect_uris:
        raise PageError("the address to return to (redirect_uri) is not one this application registered")
    return client, redirect_uri


def authorization_request(params, client: WebClient, redirect_uri: str) -> AuthorizationRequest:
    """Validate the rest of an authorization request (RFC 6749 4.1.1, RFC 7636 4.3, OIDC Core 3.1.2.1) once
    `client_of` has found the client and its redirect URI, so an error here can be sent back to it."""
    if params.get("request") is not None:
        raise RedirectError("request_not_supported", "request objects are not supported")
    if params.get("request_uri") is not None:
        raise RedirectError("request_uri_not_supported", "request_uri is not supported")
    for name in REQUEST_FIELDS:
        one(params, name)
    response_type = params.get("response_type")
    if not response_type:
        raise RedirectError("invalid_request", "response_type is required")
    if response_type != "code":
        raise RedirectError("unsupported_response_type", "only response_type=code is served")
    if params.get("response_mode", "query") != "query":
        raise RedirectError("invalid_request", "only response_mode=query is served")
    challenge = params.get("code_challenge")
    if not challenge:
        raise RedirectError("invalid_request", "PKCE is required: send code_challenge and code_challenge_method=S256")
    if params.get("code_challenge_method") != "S256":
        raise RedirectError("invalid_request", "code_challenge_method must be S256")
    if not CHALLENGE.fullmatch(challenge):
        raise RedirectError("invalid_request", "code_challenge is not an S256 challenge (43 base64url characters)")
    scope = tuple(dict.fromkeys(params.get("scope", "").split()))
    if unknown := [s for s in scope if s not in SCOPES]:
        raise RedirectError("invalid_scope", f"unknown scope: {' '.join(unknown)[:100]}")
    if "none" in params.get("prompt", "").split():
        raise RedirectError("login_required", "signing in here always asks the person")
    state, nonce, hint = params.get("state"), params.get("nonce"), params.get("login_hint")
    if any(v is not None and len(v) > MAX_PARAMETER for v in (state, nonce, hint)):
        raise RedirectError("invalid_request", f"state, nonce and login_hint are at most {MAX_PARAMETER} characters")
    return AuthorizationRequest(client, redirect_uri, state, challenge, scope, nonce, hint)


def with_query(uri: str, params: dict[str, str | None]) -> str:
    """`uri` with `params` added to its query (a registered URI may have a query of its own, RFC 6749 3.1.2)."""
    parts = urlsplit(uri)
    query = parse_qsl(parts.query, keep_blank_values=True) + [(k, v) for k, v in params.items() if v is not None]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def sign_in_choice(form) -> tuple[str, list[str]]:
    """The subject and groups the person picked, or `ValueError` saying what to fix."""
    subject = (form.get("subject") or "").strip()
    if not subject or len(subject) > 255 or any(ord(c) < 32 or ord(c) == 127 for c in subject):
        raise ValueError("Enter a subject of 1 to 255 characters, without control characters.")
    if subject.startswith("system:serviceaccount:"):
        raise ValueError("A service account is not a person: enter another subject.")
    groups = [g for g in form.getlist("groups") if g in DEV_GROUPS]
    for group in re.split(r"[\s,]+", form.get("other_groups") or ""):
        if not group:
            continue
        if not GROUP.fullmatch(group):
            raise ValueError("Other groups are names of at most 100 characters, separated by commas or spaces.")
        groups.append(group)
    return subject, list(dict.fromkeys(groups))


@dataclass(frozen=True)
class Grant:
    """What a code stands for until it is redeemed."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    subject: str
    groups: tuple[str, ...]
    scope: tuple[str, ...]
    nonce: str | None
    auth_time: int
    expires: float  # time.monotonic()


class Codes:
    """Authorization codes waiting to be redeemed, kept by their hash; each is taken once."""

    def __init__(self, seconds: float = CODE_SECONDS, limit: int = MAX_CODES):
        self.seconds, self.limit = seconds, limit
        self._grants: dict[bytes, Grant] = {}
        self._lock = threading.Lock()

    def issue(self, request: AuthorizationRequest, subject: str, groups: list[str]) -> str:
        code = secrets.token_urlsafe(32)
        now = time.monotonic()
        grant = Grant(
            request.client.client_id,
            request.redirect_uri,
            request.code_challenge,
            subject,
            tuple(groups),
            request.scope,
            request.nonce,
            int(time.time()),
            now + self.seconds,
        )
        with self._lock:
            for key in [k for k, g in self._grants.items() if g.expires <= now]:
                del self._grants[key]
            while len(self._grants) >= self.limit:
                del self._grants[next(iter(self._grants))]
            self._grants[hashlib.sha256(code.encode()).digest()] = grant
        return code

    def take(self, code: str) -> Grant | None:
        """The code's grant, once: a second try, or one after it expired, is None."""
        with self._lock:
            grant = self._grants.pop(hashlib.sha256(code.encode()).digest(), None)
        return grant if grant is not None and grant.expires > time.monotonic() else None


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode()


def redeem(form, clients: Mapping[str, WebClient], codes: Codes) -> tuple[WebClient, Grant]:
    """The grant of an authorization code token request (RFC 6749 4.1.3, RFC 7636 4.5), or `GrantError`. The code is
    spent by any attempt that names it, so a stolen code cannot be tried twice."""
    client = clients.get(form.get("client_id") or "")
    if client is None:
        raise GrantError("invalid_client", "a public client sends its registered client_id", 401)
    code, redirect_uri, verifier = form.get("code"), form.get("redirect_uri"), form.get("code_verifier")
    if not code or not redirect_uri or not verifier:
        raise GrantError("invalid_request", "send code, redirect_uri and code_verifier")
    grant = codes.take(code)
    if grant is None:
        raise GrantError("invalid_grant", "the code is unknown, already used or expired")
    if grant.client_id != client.client_id or grant.redirect_uri != redirect_uri:
        raise GrantError("invalid_grant", "the code was issued to another client or redirect_uri")
    if not VERIFIER.fullmatch(verifier) or not hmac.compare_digest(s256(verifier), grant.code_challenge):
        raise GrantError("invalid_grant", "code_verifier does not match the code_challenge")
    return client, grant


def token_claims(issuer: str, client: WebClient, grant: Grant, seconds: int = ACCESS_SECONDS) -> tuple[dict, dict | None]:
    """The access token's claims (RFC 9068: the caller's `sub` and `groups`, audience the client's) and, for scope
    `openid`, the ID token's (OIDC Core 2: audience the client, `nonce` echoed)."""
    now = int(time.time())
    access = {
        "iss": issuer,
        "sub": grant.subject,
        "aud": client.audience,
        "iat": now,
        "nbf": now,
        "exp": now + seconds,
        "jti": secrets.token_urlsafe(16),
        "groups": list(grant.groups),
        "client_id": client.client_id,
        "scope": " ".join(grant.scope),
    }
    if "openid" not in grant.scope:
        return access, None
    identity: dict[str, Any] = {
        "iss": issuer,
        "sub": grant.subject,
        "aud": client.client_id,
        "iat": now,
        "exp": now + seconds,
        "auth_time": grant.auth_time,
        "azp": client.client_id,
    }
    if "profile" in grant.scope:
        identity["preferred_username"] = grant.subject
    if "groups" in grant.scope:
        identity["groups"] = list(grant.groups)
    if grant.nonce is not None:
        identity["nonce"] = grant.nonce
    return access, identity
