"""The dev issuer: an OIDC-style token issuer for the local platform and the tests.

It keeps its own key pairs in a directory (an EC key it signs with, and an RSA key it also publishes, as
issuers publish several), serves its JWKS on loopback and mints caller tokens (`sub`, `groups`, audience
`agentfn`) and service tokens shaped like Kubernetes projected ServiceAccount tokens
(`sub` = `system:serviceaccount:<ns>:<sa>`, audience of the memory service).

Its token endpoint (`POST /token`) does token exchange (RFC 8693) with the checks a real issuer makes: the
client authenticates with its workload token (RFC 7523 client assertion: a service token whose audience is
this issuer), the client must be one configured for exchange, the subject token must verify (signature,
issuer, expiry) and be meant for that client (an audience the client may present), and the audience asked
for must be one the client may ask for. The exchanged token keeps `sub` and `groups`, has `aud` = the
audience asked for, `act` = `{"sub": <client>}` (nesting the subject token's own `act`), and lives minutes.
Errors are RFC 6749's (`invalid_request`, `invalid_client`, `invalid_grant`, `invalid_target`,
`unauthorized_client`, `unsupported_grant_type`), never a 500.

It signs people in as an OIDC issuer does for a browser app (`sign_in`): authorization code with PKCE for the
public web clients it is configured with, at `/authorize` (a page where the person picks a subject and groups) and
`/token`, with CORS on the token endpoint, discovery and JWKS for those clients' origins only.

The verifying code in `identity` is the same one used against a real gateway and cluster. It is a
development tool: it mints a token for whoever asks at `/v1/tokens` and signs in anyone at `/authorize`, so it
only ever listens on loopback.

Configuration: `DevIssuerSettings` below (docs/configuration.md), read by `create_app()`.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from flask import Flask, jsonify, redirect, request, url_for

from agentfn.shared.identity import SERVICE_ACCOUNT_PREFIX
from agentfn.shared.settings import REQUIRED, Settings, setting

from .sign_in import (
    AUTHORIZATION_CODE,
    DEV_GROUPS,
    SCOPES,
    AuthorizationRequest,
    Codes,
    GrantError,
    PageError,
    RedirectError,
    WebClient,
    authorization_request,
    client_of,
    origin,
    redeem,
    sign_in_choice,
    token_claims,
    web_clients_from_env,
    with_query,
)
from .sign_in_page import CSS, ERROR, PAGE

KEY_FILE = "dev-issuer-key.pem"
RSA_KEY_FILE = "dev-issuer-rsa-key.pem"
ALGORITHM = "ES256"
CALLER_AUDIENCE = "agentfn"
SERVICE_AUDIENCE = "agentfn-memory"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
TOKEN_TYPES = ("urn:ietf:params:oauth:token-type:access_token", "urn:ietf:params:oauth:token-type:jwt")
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
EXCHANGE_SECONDS = 300
# The doors a browser app on a web client's origin reads: the token endpoint and the metadata that finds it.
CORS_DOORS = frozenset(
    {"/token", "/.well-known/openid-configuration", "/.well-known/oauth-authorization-server", "/.well-known/jwks.json"}
)


@dataclass(frozen=True)
class ExchangeClient:
    """What one client (a service account) may exchange: subject tokens meant for `subject_audiences`,
    for tokens meant for `audiences`."""

    subject_audiences: frozenset[str]
    audiences: frozenset[str]


class ExchangeError(Exception):
    def __init__(self, error: str, description: str, status: int = 400):
        super().__init__(description)
        self.error, self.description, self.status = error, description, status


def _key(path: Path, generate):
    if path.exists():
        return serialization.load_pem_private_key(path.read_bytes(), password=None)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return key


class DevIssuer:
    def __init__(
        self,
        directory: str | Path,
        url: str,
        clients: Mapping[str, ExchangeClient] | None = None,
        exchange_seconds: int = EXCHANGE_SECONDS,
        web_clients: Mapping[str, WebClient] | None = None,
        codes: Codes | None = None,
    ):
        self.url = url.rstrip("/")
        self.clients = dict(clients or {})
        self.exchange_seconds = exchange_seconds
        self.web_clients = dict(web_clients or {})
        self.web_origins = frozenset().union(*(c.origins for c in self.web_clients.values()))
        self.codes = codes or Codes()
        self._key = _key(Path(directory) / KEY_FILE, lambda: ec.generate_private_key(ec.SECP256R1()))
        self._rsa = _key(Path(directory) / RSA_KEY_FILE, lambda: rsa.generate_private_key(65537, 2048))
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self._key.public_key()))
        self.kid = jwt.PyJWK(jwk).key_id or jwk["x"][:16]
        self.jwk = {**jwk, "kid": self.kid, "use": "sig", "alg": ALGORITHM}
        rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._rsa.public_key()))
        self.rsa_kid = "rsa-" + rsa_jwk["n"][:16]
        self.rsa_jwk = {**rsa_jwk, "kid": self.rsa_kid, "use": "sig", "alg": "RS256"}

    @property
    def token_endpoint(self) -> str:
        return f"{self.url}/token"

    @property
    def authorization_endpoint(self) -> str:
        return f"{self.url}/authorize"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/.well-known/jwks.json"

    def sign(self, claims: dict[str, Any], headers: dict[str, Any] | None = None, *, rsa_key: bool = False) -> str:
        """Sign any claims with the issuer's key, EC (ES256) or RSA (RS256) (the tests forge near-valid tokens)."""
        if rsa_key:
            return jwt.encode(claims, self._rsa, algorithm="RS256", headers={"kid": self.rsa_kid, **(headers or {})})
        return jwt.encode(claims, self._key, algorithm=ALGORITHM, headers={"kid": self.kid, **(headers or {})})

    def _claims(self, sub: str, audience: str, ttl: int) -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": self.url,
            "sub": sub,
            "aud": audience,
            "iat": now,
            "nbf": now,
            "exp": now + ttl,
            "jti": str(uuid.uuid4()),
        }

    def caller_token(
        self, subject: str, groups: list[str] | None = None, *, audience: str = CALLER_AUDIENCE, ttl: int = 3600
    ) -> str:
        return self.sign({**self._claims(subject, audience, ttl), "groups": list(groups or [])})

    def service_token(self, account: str, *, audience: str = SERVICE_AUDIENCE, ttl: int = 3600) -> str:
        if not account.startswith(SERVICE_ACCOUNT_PREFIX):
            raise ValueError(f"a service account is named {SERVICE_ACCOUNT_PREFIX}<namespace>:<name>")
        namespace, _, name = account[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
        claims = self._claims(account, audience, ttl)
        claims["kubernetes.io"] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": str(uuid.uuid4())}}
        return self.sign(claims)

    # --- sign-in: authorization code with PKCE ---------------------------------------------------------

    def authorization_code(self, form: Mapping[str, str]) -> dict[str, Any]:
        """The token response for a redeemed code: the access token (RFC 9068 `at+jwt`) and, for scope `openid`,
        the ID token; or `GrantError`."""
        client, grant = redeem(form, self.web_clients, self.codes)
        access, identity = token_claims(self.url, client, grant)
        answer = {
            "access_token": self.sign(access, {"typ": "at+jwt"}),
            "token_type": "Bearer",
            "expires_in": access["exp"] - access["iat"],
            "scope": access["scope"],
        }
        if identity is not None:
            answer["id_token"] = self.sign(identity)
        return answer

    def token(self, form: Mapping[str, str]) -> dict[str, Any]:
        """The token endpoint: an authorization code (a person signing in) or a token exchange (a workload)."""
        if form.get("grant_type") == AUTHORIZATION_CODE:
            return self.authorization_code(form)
        return self.exchange(form)

    # --- token exchange (RFC 8693) -------------------------------------------------------------------

    def _verify(self, token: str, audience: str | list[str] | None) -> dict[str, Any]:
        key = (
            self._rsa.public_key() if jwt.get_unverified_header(token).get("kid") == self.rsa_kid else self._key.public_key()
        )
        return jwt.decode(
            token,
            key,
            algorithms=["ES256", "RS256"],
            issuer=self.url,
            audience=audience,
            leeway=10,
            options={"require": ["exp", "iss", "aud", "sub"], "verify_aud": audience is not None},
        )

    def client(self, form: Mapping[str, str]) -> tuple[str, ExchangeClient]:
        """The authenticated client (RFC 7523 client assertion: its workload token, audience this issuer)."""
        if form.get("client_assertion_type") != JWT_BEARER or not form.get("client_assertion"):
            raise ExchangeError("invalid_client", "authenticate with a client_assertion (jwt-bearer)", 401)
        try:
            claims = self._verify(form["client_assertion"], [self.url, self.token_endpoint])
        except (jwt.PyJWTError, ValueError, TypeError):
            raise ExchangeError("invalid_client", "the client assertion does not verify", 401) from None
        account = claims["sub"]
        if form.get("client_id") and form["client_id"] != account:
            raise ExchangeError("invalid_client", "client_id is not the client assertion's subject", 401)
        client = self.clients.get(account)
        if client is None:
            raise ExchangeError("unauthorized_client", "this client may not exchange tokens")
        return account, client

    def exchange(self, form: Mapping[str, str]) -> dict[str, Any]:
        """The token response for one exchange request, or `ExchangeError`."""
        if form.get("grant_type") != TOKEN_EXCHANGE:
            raise ExchangeError("unsupported_grant_type", "only authorization_code and token exchange are served here")
        account, client = self.client(form)
        subject_token, audience = form.get("subject_token"), form.get("audience")
        if not subject_token or form.get("subject_token_type") not in TOKEN_TYPES:
            raise ExchangeError("invalid_request", "send subject_token and an access_token or jwt subject_token_type")
        if form.get("requested_token_type", TOKEN_TYPES[0]) not in TOKEN_TYPES:
            raise ExchangeError("invalid_request", "only access tokens are issued here")
        if not audience or len(getattr(form, "getlist", lambda k: [form.get(k)])("audience")) > 1 or form.get("actor_token"):
            raise ExchangeError("invalid_request", "send exactly one audience (and no actor_token)")
        if audience not in client.audiences:
            raise ExchangeError("invalid_target", "this client may not ask for that audience")
        try:
            subject = self._verify(subject_token, sorted(client.subject_audiences))
        except (jwt.PyJWTError, ValueError, TypeError):
            raise ExchangeError(
                "invalid_grant", "the subject token does not verify or is not meant for this client"
            ) from None
        if not isinstance(subject["sub"], str) or subject["sub"].startswith(SERVICE_ACCOUNT_PREFIX):
            raise ExchangeError("invalid_grant", "the subject token does not name a caller")
        now = int(time.time())
        exp = min(now + self.exchange_seconds, int(subject["exp"]))
        act = {"sub": account, **({"act": subject["act"]} if isinstance(subject.get("act"), dict) else {})}
        claims = {
            "iss": self.url,
            "sub": subject["sub"],
            "aud": audience,
            "iat": now,
            "nbf": now,
            "exp": exp,
            "jti": str(uuid.uuid4()),
            "groups": subject.get("groups", []),
            "act": act,
            "client_id": account,
        }
        return {
            "access_token": self.sign(claims),
            "issued_token_type": TOKEN_TYPES[0],
            "token_type": "Bearer",
            "expires_in": exp - now,
        }


def clients_from_env(value: str | None) -> dict[str, ExchangeClient]:
    doc = json.loads(value or "{}")
    return {
        account: ExchangeClient(frozenset(c.get("subject_audiences", [])), frozenset(c.get("audiences", [])))
        for account, c in doc.items()
    }


@dataclass(frozen=True)
class DevIssuerSettings(Settings):
    directory: str = setting("AGENTFN_DEV_ISSUER_DIR", "var/issuer", "the dev issuer's key pairs")
    issuer: str = setting("AGENTFN_JWT_ISSUER", REQUIRED, "the dev issuer's own URL: the `iss` of what it signs")
    clients: str = setting(
        "AGENTFN_DEV_ISSUER_CLIENTS",
        "{}",
        "the dev issuer's token exchange clients: JSON, service account -> "
        '`{"subject_audiences": [...], "audiences": [...]}` (`agentfn up` sets it)',
    )
    exchange_seconds: int = setting(
        "AGENTFN_DEV_ISSUER_EXCHANGE_SECONDS",
        EXCHANGE_SECONDS,
        "lifetime of a token the dev issuer exchanges (never past the subject token's)",
        minimum=1,
    )
    web_clients: str = setting(
        "AGENTFN_DEV_ISSUER_WEB_CLIENTS",
        "{}",
        "the dev issuer's public clients that sign people in (authorization code + PKCE): JSON, client_id -> "
        '`{"redirect_uris": [...], "audience": "agentfn"}`, redirect URIs matched exactly (`agentfn up` registers '
        "`agentfn-workbench` at `http://127.0.0.1:<gateway port>/`)",
    )


def create_app(issuer: DevIssuer | None = None) -> Flask:
    """The issuer's HTTP face: discovery, JWKS, the token endpoint, sign-in and a token counter for the dev CLI."""
    if issuer is None:
        settings = DevIssuerSettings.from_env()
        issuer = DevIssuer(
            settings.directory,
            settings.issuer,
            clients_from_env(settings.clients),
            settings.exchange_seconds,
            web_clients_from_env(settings.web_clients, CALLER_AUDIENCE),
        )
    app = Flask("agentfn.dev_issuer")

    @app.get("/.well-known/openid-configuration")
    @app.get("/.well-known/oauth-authorization-server")
    def discovery():
        """OIDC discovery and RFC 8414 metadata, so any OAuth-aware client finds the keys and the token endpoint."""
        return jsonify(
            issuer=issuer.url,
            jwks_uri=issuer.jwks_url,
            token_endpoint=issuer.token_endpoint,
            authorization_endpoint=issuer.authorization_endpoint,
            response_types_supported=["code"],
            response_modes_supported=["query"],
            code_challenge_methods_supported=["S256"],
            grant_types_supported=[TOKEN_EXCHANGE, AUTHORIZATION_CODE],
            scopes_supported=list(SCOPES),
            token_endpoint_auth_methods_supported=["private_key_jwt", "none"],
            token_endpoint_auth_signing_alg_values_supported=[ALGORITHM, "RS256"],
            subject_types_supported=["public"],
            id_token_signing_alg_values_supported=[ALGORITHM],
            claims_supported=[
                "iss",
                "sub",
                "aud",
                "exp",
                "iat",
                "auth_time",
                "nonce",
                "azp",
                "preferred_username",
                "groups",
            ],
            authorization_response_iss_parameter_supported=True,
        )

    @app.get("/.well-known/jwks.json")
    def jwks():
        """The public key set."""
        return jsonify(keys=[issuer.jwk, issuer.rsa_jwk])

    @app.post("/token")
    def token():
        """Authorization code (RFC 6749 4.1.3, PKCE) and token exchange (RFC 8693); errors as RFC 6749 5.2 says."""
        try:
            answer, status = issuer.token(request.form), 200
        except (ExchangeError, GrantError) as e:
            answer, status = {"error": e.error, "error_description": e.description}, e.status
        response = jsonify(answer)
        response.status_code = status
        response.headers["Cache-Control"] = "no-store"
        response.headers["Pragma"] = "no-cache"
        return response

    sign_in_routes(app, issuer)

    @app.after_request
    def cors(response):
        """CORS for a browser app on a registered web client's origin, on the doors it reads; no credentials."""
        if request.path not in CORS_DOORS:
            return response
        response.vary.add("Origin")
        sent = request.headers.get("Origin")
        if sent in issuer.web_origins:
            response.headers["Access-Control-Allow-Origin"] = sent
            if request.method == "OPTIONS":
                response.headers["Access-Control-Allow-Methods"] = "POST" if request.path == "/token" else "GET"
                response.headers["Access-Control-Allow-Headers"] = "Content-Type"
                response.headers["Access-Control-Max-Age"] = "600"
        return response

    @app.post("/v1/tokens")
    def caller_token():
        """A caller token for a subject and groups."""
        body = request.get_json(force=True, silent=True) or {}
        subject, groups = body.get("subject"), body.get("groups", [])
        if not isinstance(subject, str) or not subject or not isinstance(groups, list):
            return jsonify(error="send {subject, groups?}"), 422
        audience = body.get("audience", CALLER_AUDIENCE)
        if not isinstance(audience, str) or not audience:
            return jsonify(error="audience is a string"), 422
        return jsonify(
            token=issuer.caller_token(subject, [str(x) for x in groups], audience=audience, ttl=int(body.get("ttl", 3600)))
        )

    @app.post("/v1/service-tokens")
    def service_token():
        """A service token shaped like a projected ServiceAccount token."""
        body = request.get_json(force=True, silent=True) or {}
        try:
            token = issuer.service_token(str(body.get("account", "")), audience=body.get("audience", SERVICE_AUDIENCE))
        except ValueError as e:
            return jsonify(error=str(e)), 422
        return jsonify(token=token)

    @app.get("/healthz")
    def healthz():
        return jsonify(status="ok")

    return app


def sign_in_routes(app: Flask, issuer: DevIssuer) -> None:
    """`/authorize`: the sign-in page (GET) and its form (POST), with the page's own strict headers."""
    # Compiled once; Flask's environment autoescapes a template made from a string (every value is text).
    sign_in_template = app.jinja_env.from_string(PAGE)
    error_template = app.jinja_env.from_string(ERROR)

    def page_headers(response, form_action: str = "'none'"):
        response.headers["Content-Security-Policy"] = (
            f"default-src 'none'; style-src 'self'; form-action {form_action}; frame-ancestors 'none'; base-uri 'none'"
        )
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"  # a same-origin POST still sends its Origin
        response.headers["Cache-Control"] = "no-store"
        return response

    def error_page(e: PageError):
        html = error_template.render(detail=e.description, css=url_for("sign_in_css"))
        return page_headers(app.response_class(html, e.status, mimetype="text/html"))

    def sign_in_page(
        ask: AuthorizationRequest, subject: str = "", chosen=(), other_groups: str = "", error: str = "", status: int = 200
    ):
        html = sign_in_template.render(
            ask=ask,
            action=url_for("authorize"),
            css=url_for("sign_in_css"),
            subject=subject,
            groups=DEV_GROUPS,
            chosen=chosen,
            other_groups=other_groups,
            error=error,
        )
        # The form's POST is answered with a redirect to the client: form-action must allow its origin too.
        response = app.response_class(html, status, mimetype="text/html")
        return page_headers(response, f"'self' {origin(ask.redirect_uri)}")

    def back(redirect_uri: str, **params):
        response = redirect(with_query(redirect_uri, {**params, "iss": issuer.url}), 302)
        response.headers["Cache-Control"] = "no-store"
        return response

    def from_this_page() -> None:
        """The form is taken only from the sign-in page itself: a cross-site form must not sign a browser in."""
        site, sent = request.headers.get("Sec-Fetch-Site"), request.headers.get("Origin")
        if (site is not None and site != "same-origin") or (sent is not None and sent != origin(issuer.url)):
            raise PageError("this form is only taken from the sign-in page itself", 403)

    @app.route("/authorize", methods=["GET", "POST"])
    def authorize():
        """OAuth 2.1 / OIDC authorization endpoint: authorization code with PKCE (S256) for public web clients."""
        params = request.args if request.method == "GET" else request.form
        try:
            if request.method == "POST":
                from_this_page()
            client, redirect_uri = client_of(params, issuer.web_clients)
        except PageError as e:
            return error_page(e)
        states = params.getlist("state")
        state = states[0] if len(states) == 1 else None
        try:
            ask = authorization_request(params, client, redirect_uri)
        except RedirectError as e:
            return back(redirect_uri, error=e.error, error_description=e.description, state=state)
        if request.method == "GET":
            return sign_in_page(ask, subject=ask.login_hint or "")
        if params.get("action") == "cancel":
            return back(redirect_uri, error="access_denied", error_description="the person cancelled", state=state)
        try:
            subject, groups = sign_in_choice(params)
        except ValueError as e:
            return sign_in_page(
                ask,
                subject=params.get("subject", ""),
                chosen=params.getlist("groups"),
                other_groups=params.get("other_groups", ""),
                error=str(e),
                status=422,
            )
        return back(redirect_uri, code=issuer.codes.issue(ask, subject, groups), state=state)

    @app.get("/sign-in.css")
    def sign_in_css():
        response = app.response_class(CSS, mimetype="text/css")
        response.headers["Cache-Control"] = "max-age=3600"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
