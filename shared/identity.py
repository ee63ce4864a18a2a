"""Who is calling: caller JWTs from the platform gateway and service tokens from Kubernetes.

A caller token names the subject (`sub`) and its rights (`groups`); a service token names a workload
(`system:serviceaccount:<namespace>:<name>`). Both are JWTs checked against a JWKS with a fixed list of
asymmetric algorithms. They are told apart by audience, so neither passes the other's door.

Configuration (environment):

| name | default | meaning |
|---|---|---|
| `AGENTFN_JWT_ISSUER` | (required) | `iss` of caller tokens |
| `AGENTFN_JWT_AUDIENCE` | `agentfn` | `aud` of caller tokens |
| `AGENTFN_JWKS_URL` | (required) | keys of the caller token issuer |
| `AGENTFN_JWT_LEEWAY_SECONDS` | `10` | clock skew allowed on `exp`/`nbf`/`iat` |
| `AGENTFN_SERVICE_JWT_ISSUER` | the caller issuer | `iss` of service tokens (the cluster's service-account issuer) |
| `AGENTFN_SERVICE_JWT_AUDIENCE` | `agentfn-memory` | `aud` of service tokens (the projected token's audience) |
| `AGENTFN_SERVICE_JWKS_URL` | the caller JWKS | keys of the service-account issuer (the API server's `/openid/v1/jwks`) |
| `AGENTFN_SERVICE_JWKS_CA_FILE` | (none) | CA bundle for the service JWKS (the cluster CA) |
| `AGENTFN_SERVICE_JWKS_TOKEN_FILE` | (none) | bearer token sent when fetching the service JWKS |
| `AGENTFN_TRUSTED_SERVICE_ACCOUNTS` | (none) | comma-separated service accounts allowed at service doors |
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import wraps

import jwt
from flask import current_app, g, request

from .problems import forbidden, unauthorized, unavailable

# Asymmetric only: a symmetric algorithm would let anyone holding the public key sign.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
MAX_TOKEN_BYTES = 8192


@dataclass(frozen=True)
class Caller:
    """A verified caller. `token` is kept only to forward it unchanged to tools (it runs as the caller)."""

    subject: str
    groups: tuple[str, ...]
    token: str = field(repr=False)


@dataclass(frozen=True)
class Service:
    """A verified workload identity, e.g. `system:serviceaccount:agentfn:agentfn-model`."""

    account: str


@dataclass(frozen=True)
class Trust:
    """One issuer, audience and key set a door accepts."""

    issuer: str
    audience: str
    jwks_url: str
    leeway: int = 10
    ca_file: str | None = None
    token_file: str | None = None


class Verifier:
    """Verifies JWTs of one `Trust`; keys are fetched once and refetched when an unknown `kid` shows up."""

    def __init__(self, trust: Trust):
        self.trust = trust
        self._lock = threading.Lock()
        self._client: jwt.PyJWKClient | None = None

    def _jwks(self) -> jwt.PyJWKClient:
        with self._lock:
            if self._client is None:
                headers = {}
                if self.trust.token_file:
                    with open(self.trust.token_file) as f:
                        headers["Authorization"] = f"Bearer {f.read().strip()}"
                context = ssl.create_default_context(cafile=self.trust.ca_file) if self.trust.ca_file else None
                self._client = jwt.PyJWKClient(
                    self.trust.jwks_url, cache_keys=True, lifespan=300, headers=headers, timeout=5, ssl_context=context
                )
            return self._client

    def claims(self, token: str) -> dict:
        """The token's claims, or `unauthorized` saying which check failed (never echoing the token)."""
        if len(token) > MAX_TOKEN_BYTES:
            raise unauthorized("the token is too large")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise unauthorized("the token is not a JWT") from None
        if header.get("alg") not in ALGORITHMS:
            raise unauthorized("the token's algorithm is not accepted")
        try:
            key = self._jwks().get_signing_key_from_jwt(token)
        except (jwt.PyJWKClientConnectionError, ValueError):
            # The issuer's key set is down or not JSON: a dependency failure, not the caller's fault.
            raise unavailable("the token issuer's keys cannot be fetched; try again shortly") from None
        except jwt.PyJWTError:
            raise unauthorized("the token is signed by an unknown key") from None
        try:
            return jwt.decode(
                token,
                key.key,
                algorithms=ALGORITHMS,
                audience=self.trust.audience,
                issuer=self.trust.issuer,
                leeway=self.trust.leeway,
                options={"require": ["exp", "iss", "aud", "sub"], "verify_iat": True},
            )
        except jwt.ExpiredSignatureError:
            raise unauthorized("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise unauthorized("the token is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise unauthorized("the token is not meant for this service") from None
        except jwt.InvalidIssuerError:
            raise unauthorized("the token's issuer is not trusted") from None
        except jwt.MissingRequiredClaimError as e:
            raise unauthorized(f"the token has no '{e.claim}' claim") from None
        except jwt.InvalidSignatureError:
            raise unauthorized("the token's signature does not verify") from None
        except jwt.PyJWTError:
            raise unauthorized("the token is invalid") from None


def bearer_token() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("send a bearer token in the Authorization header")
    return token.strip()


def _subject(claims: dict) -> str:
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub or len(sub) > 255:
        raise unauthorized("the token's subject is invalid")
    return sub


def verify_caller(verifier: Verifier, token: str) -> Caller:
    claims = verifier.claims(token)
    subject = _subject(claims)
    if subject.startswith(SERVICE_ACCOUNT_PREFIX):
        raise unauthorized("a service account is not a caller")
    groups = claims.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(x, str) for x in groups):
        raise unauthorized("the token's groups claim is invalid")
    return Caller(subject=subject, groups=tuple(groups), token=token)


def verify_service(verifier: Verifier, token: str, trusted: frozenset[str]) -> Service:
    claims = verifier.claims(token)
    account = _subject(claims)
    if not account.startswith(SERVICE_ACCOUNT_PREFIX):
        raise unauthorized("the token does not name a service account")
    if account not in trusted:
        raise forbidden("this service account is not trusted here")
    return Service(account=account)


@dataclass(frozen=True)
class Identity:
    """The trust a function is configured with: caller tokens, and optionally service tokens."""

    caller: Verifier
    service: Verifier
    trusted_services: frozenset[str]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Identity:
        def need(name: str) -> str:
            value = env.get(name, "").strip()
            if not value:
                raise RuntimeError(f"{name} must be set")
            return value

        leeway = int(env.get("AGENTFN_JWT_LEEWAY_SECONDS", "10"))
        issuer, jwks = need("AGENTFN_JWT_ISSUER"), need("AGENTFN_JWKS_URL")
        caller = Trust(issuer, env.get("AGENTFN_JWT_AUDIENCE", "agentfn"), jwks, leeway)
        service = Trust(
            env.get("AGENTFN_SERVICE_JWT_ISSUER") or issuer,
            env.get("AGENTFN_SERVICE_JWT_AUDIENCE", "agentfn-memory"),
            env.get("AGENTFN_SERVICE_JWKS_URL") or jwks,
            leeway,
            env.get("AGENTFN_SERVICE_JWKS_CA_FILE") or None,
            env.get("AGENTFN_SERVICE_JWKS_TOKEN_FILE") or None,
        )
        if service.audience == caller.audience:
            raise RuntimeError("caller and service tokens need different audiences")
        trusted = frozenset(a.strip() for a in env.get("AGENTFN_TRUSTED_SERVICE_ACCOUNTS", "").split(",") if a.strip())
        return cls(Verifier(caller), Verifier(service), trusted)


def caller_required(view: Callable) -> Callable:
    """Verify the caller's token before the view; the view reads `g.caller`."""

    @wraps(view)
    def wrapped(*args, **kwargs):
        g.caller = verify_caller(current_app.extensions["agentfn.identity"].caller, bearer_token())
        return view(*args, **kwargs)

    return wrapped


def service_required(view: Callable) -> Callable:
    """Verify a trusted service account's token before the view; the view reads `g.service`."""

    @wraps(view)
    def wrapped(*args, **kwargs):
        identity: Identity = current_app.extensions["agentfn.identity"]
        g.service = verify_service(identity.service, bearer_token(), identity.trusted_services)
        return view(*args, **kwargs)

    return wrapped
