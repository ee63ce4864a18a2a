"""Who is calling: caller JWTs from the platform gateway or the token exchange, and service tokens from Kubernetes.

A caller token names the subject (`sub`) and its rights (`groups`); a service token names a workload
(`system:serviceaccount:<namespace>:<name>`). Both are JWTs checked against a JWKS with a fixed list of
asymmetric algorithms, each bound to the kind of key it fits. They are told apart by audience, so neither
passes the other's door.

A caller token reaches a part in one of two shapes. The gateway's token (audience `agentfn`) is accepted
only by the parts the gateway routes to (memory's public doors, the model function). Every other call as
the caller carries a token the model function got by token exchange (RFC 8693): the same `sub` and
`groups`, the audience of the part called, and an actor (`act.sub`, or `azp` where the issuer names the
requesting client there) that must be one this part trusts. A part behind no route (the page fetcher,
the tools) accepts only those, so it is never callable on its own, by signature and not only by network.

A token is exchanged by what it is, not by its audience: one that carries `act`, is meant for this part's own
audience, or was issued to a client (`azp`, else `client_id`) other than the gateway's (`AGENTFN_GATEWAY_CLIENTS`)
is exchanged, and must be meant for this part and come from a trusted actor. Only a token that is none of these is
the person's own.

Configuration: `IdentitySettings` below (docs/configuration.md).

PyJWT (and the crypto backend it loads) is imported on the first token, not on the way to ready: a part's
app warms it up right after it first answers ready (`Identity.warm`).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, wraps
from typing import Any

from flask import current_app, g, request

from . import pseudonym
from .problems import ProblemError, forbidden, unauthorized, unavailable
from .settings import REQUIRED, Settings, setting

# Asymmetric only: a symmetric algorithm would let anyone holding the public key sign.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
# The algorithms each kind of key verifies: a header naming another (RS256 on an EC key) is refused before
# the signature is checked, where a mismatch would be a TypeError inside the crypto library.
FITS = {
    ("RSA", None): {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"},
    ("EC", "P-256"): {"ES256"},
    ("EC", "P-384"): {"ES384"},
    ("EC", "P-521"): {"ES512"},
    ("OKP", "Ed25519"): {"EdDSA"},
    ("OKP", "Ed448"): {"EdDSA"},
}
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
MAX_TOKEN_BYTES = 8192
# Tokens whose verification is remembered, per verifier: a caller sends the same token with every request of a
# turn, and checking it again (about half a millisecond: the signature, and PyJWT's decoding) was most of a door's
# own time.
VERIFIED_TOKENS = 1024
GATEWAY_AUDIENCE = "agentfn"


@dataclass(frozen=True)
class Caller:
    """A verified caller. `token` is the token it came with: the subject token of the next exchange (or, with
    raw forwarding, what is sent on). `actor` names who exchanged it, None for the gateway's own token."""

    subject: str
    groups: tuple[str, ...]
    token: str = field(repr=False)
    actor: str | None = None
    token_id: str | None = None  # `jti`: what a part counts an exchanged token's uses by
    expires: float | None = None  # `exp`


@dataclass(frozen=True)
class Service:
    """A verified workload identity, e.g. `system:serviceaccount:agentfn:agentfn-model`."""

    account: str


@dataclass(frozen=True)
class Trust:
    """One issuer, audience(s) and key set a door accepts."""

    issuer: str
    audience: str | tuple[str, ...]
    jwks_url: str
    leeway: int = 10
    ca_file: str | None = None
    token_file: str | None = None
    cooldown: float = 30.0


@cache
def key_set_class() -> type:
    """`KeySet`, defined on first use: it subclasses PyJWT's client, and PyJWT stays off the way to ready."""
    import jwt

    class KeySet(jwt.PyJWKClient):
        """A JWKS client that reads its bearer token file on each fetch: a projected token rotates hourly."""

        def __init__(self, trust: Trust):
            context = ssl.create_default_context(cafile=trust.ca_file) if trust.ca_file else None
            super().__init__(
                trust.jwks_url,
                cache_keys=True,
                lifespan=300,
                timeout=5,
                ssl_context=context,
                cooldown_duration=trust.cooldown,
            )
            self.token_file = trust.token_file

        def fetch_data(self) -> Any:
            if self.token_file:
                try:
                    with open(self.token_file) as f:
                        token = f.read().strip()
                except OSError:
                    raise jwt.PyJWKClientConnectionError("the key set's bearer token file cannot be read") from None
                self.headers = {"Authorization": f"Bearer {token}"}
            return super().fetch_data()

    return KeySet


class Verifier:
    """Verifies JWTs of one `Trust`; keys are fetched once and refetched when an unknown `kid` shows up.

    A token that verified is remembered (by its exact string, never logged) until its `exp`, in a bounded LRU:
    the same token again skips the signature check. A token that failed is never remembered, and any other string
    (another signature, another payload) is verified in full.
    """

    def __init__(self, trust: Trust):
        self.trust = trust
        self._lock = threading.Lock()
        self._client: Any = None  # a KeySet, made on the first token
        self._verified: OrderedDict[str, tuple[float, dict]] = OrderedDict()  # token -> (its exp, its claims)
        self._verified_lock = threading.Lock()

    def _jwks(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = key_set_class()(self.trust)
            return self._client

    def claims(self, token: str) -> dict:
        """The token's claims, or `unauthorized` saying which check failed (never echoing the token). The
        claims of a remembered token are shared: read them, never change them."""
        if len(token) > MAX_TOKEN_BYTES:
            raise unauthorized("the token is too large")
        with self._verified_lock:
            known = self._verified.get(token)
            if known is not None:
                if time.time() < known[0]:
                    self._verified.move_to_end(token)
                    return known[1]
                del self._verified[token]  # expired: verified in full again, which refuses it past the leeway
        claims = self._verify(token)
        exp = claims.get("exp")
        if isinstance(exp, int | float) and not isinstance(exp, bool):
            with self._verified_lock:
                self._verified[token] = (exp, claims)
                self._verified.move_to_end(token)
                while len(self._verified) > VERIFIED_TOKENS:
                    self._verified.popitem(last=False)
        return claims

    def _verify(self, token: str) -> dict:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise unauthorized("the token is not a JWT") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise unauthorized("the token's algorithm is not accepted")
        try:
            # By the header's `kid`: the token is decoded once more, by `jwt.decode` below, not twice.
            key = self._jwks().get_signing_key(header.get("kid"))
        except (jwt.PyJWKClientConnectionError, ValueError):
            # The issuer's key set is down or not JSON: a dependency failure, not the caller's fault.
            raise unavailable("the token issuer's keys cannot be fetched; try again shortly") from None
        except jwt.PyJWTError:
            raise unauthorized("the token is signed by an unknown key") from None
        jwk = getattr(key, "_jwk_data", {})
        if algorithm not in FITS.get((key.key_type, jwk.get("crv") if key.key_type != "RSA" else None), ()):
            raise unauthorized("the token's algorithm does not fit its key")
        try:
            return jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
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
        except (jwt.PyJWTError, TypeError, ValueError, AttributeError):
            # Whatever else a key and a token can disagree on is a token that does not verify, never a 500.
            raise unauthorized("the token is invalid") from None


@dataclass(frozen=True)
class Door:
    """Which caller tokens a part takes: the gateway's (audience `gateway`, None: not here) and exchanged
    ones for its own audience (`own`, None: none) whose actor is in `actors`. `clients`: the clients a person's
    own token may be issued to (a token naming none is the person's too)."""

    gateway: str | None
    own: str | None
    actors: frozenset[str] = frozenset()
    clients: frozenset[str] = frozenset()

    @property
    def audiences(self) -> tuple[str, ...]:
        return tuple(a for a in (self.gateway, self.own) if a)


class CallerVerifier(Verifier):
    """Caller tokens of one issuer for one `Door`."""

    def __init__(self, trust: Trust, door: Door):
        super().__init__(Trust(trust.issuer, door.audiences, trust.jwks_url, trust.leeway, cooldown=trust.cooldown))
        self.door = door

    def actor(self, claims: dict) -> str | None:
        """Who exchanged the token: `act.sub` (RFC 8693), else the requesting client `azp` names (Keycloak's
        standard exchange issues no `act`); None for the person's own token.

        Exchanged is what the token is, whatever else its audience names: it carries `act`, it is meant for this
        part's own audience, or its client is not the gateway's. Such a token must be meant for this part and come
        from an actor it trusts; the person's own door never takes it as theirs."""
        audiences = claims.get("aud")
        audiences = set(audiences) if isinstance(audiences, list) else {audiences}
        act = claims.get("act")
        client = claims.get("azp", claims.get("client_id"))
        mine = self.door.own is not None and self.door.own in audiences
        if act is None and not mine and (client is None or client in self.door.clients):
            return None
        if not mine:
            raise unauthorized("the token was exchanged for another part, or by a client that is not the gateway")
        actor = act.get("sub") if isinstance(act, dict) else client
        if not isinstance(actor, str) or actor not in self.door.actors:
            raise unauthorized("the token was not exchanged by a service this part trusts")
        return actor


def bearer_token() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("send a bearer token in the Authorization header")
    return token.strip()


def _subject(claims: dict) -> str:
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub or len(sub) > 255 or "\x00" in sub:  # Postgres text holds no NUL
        raise unauthorized("the token's subject is invalid")
    return sub


def verify_caller(verifier: Verifier, token: str) -> Caller:
    claims = verifier.claims(token)
    actor = verifier.actor(claims) if isinstance(verifier, CallerVerifier) else None
    subject = _subject(claims)
    if subject.startswith(SERVICE_ACCOUNT_PREFIX):
        raise unauthorized("a service account is not a caller")
    groups = claims.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(x, str) for x in groups):
        raise unauthorized("the token's groups claim is invalid")
    jti, exp = claims.get("jti"), claims.get("exp")
    return Caller(
        subject=subject,
        groups=tuple(groups),
        token=token,
        actor=actor,
        token_id=jti if isinstance(jti, str) and 0 < len(jti) <= 255 and "\x00" not in jti else None,
        expires=float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None,
    )


def verify_service(verifier: Verifier, token: str, trusted: frozenset[str]) -> Service:
    claims = verifier.claims(token)
    account = _subject(claims)
    if not account.startswith(SERVICE_ACCOUNT_PREFIX):
        raise unauthorized("the token does not name a service account")
    if account not in trusted:
        raise forbidden("this service account is not trusted here")
    return Service(account=account)


@dataclass(frozen=True)
class IdentitySettings(Settings):
    jwt_issuer: str = setting(
        "AGENTFN_JWT_ISSUER", REQUIRED, "`iss` of caller tokens (the gateway's and the exchanged ones)"
    )
    jwt_audience: str = setting(
        "AGENTFN_JWT_AUDIENCE",
        GATEWAY_AUDIENCE,
        "`aud` of the gateway's caller tokens (taken by memory's public doors and the model function)",
    )
    exchanged_audience: str | None = setting(
        "AGENTFN_EXCHANGED_AUDIENCE",
        None,
        "`aud` of exchanged tokens meant for this part",
        shown="the part's: `agentfn:memory`, `agentfn:page`, `agentfn:tool:<name>`",
    )
    trusted_actors: tuple[str, ...] = setting(
        "AGENTFN_TRUSTED_ACTORS",
        (),
        "comma-separated actors (`act.sub`, else `azp`) whose exchanged tokens this part takes: the model function's "
        "account",
        shown="(none; required by the page fetcher and the tools)",
    )
    gateway_clients: tuple[str, ...] = setting(
        "AGENTFN_GATEWAY_CLIENTS",
        ("agentfn-workbench",),
        "comma-separated clients (`azp`, else `client_id`) a person's own token may be issued to: the gateway's and "
        "the workbench's; a token issued to any other client is taken as exchanged (a token naming no client is the "
        "person's)",
    )
    token_forwarding: str = setting(
        "AGENTFN_TOKEN_FORWARDING",
        "exchange",
        "`raw`: the weaker setting for issuers without token exchange (the caller's token is sent on unchanged and "
        "every part takes it)",
        choices=("exchange", "raw"),
    )
    jwks_url: str = setting("AGENTFN_JWKS_URL", REQUIRED, "keys of the caller token issuer")
    jwt_leeway_seconds: int = setting("AGENTFN_JWT_LEEWAY_SECONDS", 10, "clock skew allowed on `exp`/`nbf`/`iat`", minimum=0)
    jwks_cooldown_seconds: float = setting(
        "AGENTFN_JWKS_COOLDOWN_SECONDS", 30.0, "least time between two key-set fetches for an unknown `kid`", minimum=0
    )
    service_jwt_issuer: str | None = setting(
        "AGENTFN_SERVICE_JWT_ISSUER",
        None,
        "`iss` of service tokens (the cluster's service-account issuer)",
        shown="the caller issuer",
    )
    service_jwt_audience: str = setting(
        "AGENTFN_SERVICE_JWT_AUDIENCE", "agentfn-memory", "`aud` of service tokens (the projected token's audience)"
    )
    service_jwks_url: str | None = setting(
        "AGENTFN_SERVICE_JWKS_URL",
        None,
        "keys of the service-account issuer (the API server's `/openid/v1/jwks`)",
        shown="the caller JWKS",
    )
    service_jwks_ca_file: str | None = setting(
        "AGENTFN_SERVICE_JWKS_CA_FILE", None, "CA bundle for the service JWKS (the cluster CA)"
    )
    service_jwks_token_file: str | None = setting(
        "AGENTFN_SERVICE_JWKS_TOKEN_FILE",
        None,
        "bearer token sent when fetching the service JWKS (read on each fetch: it rotates)",
    )
    trusted_service_accounts: tuple[str, ...] = setting(
        "AGENTFN_TRUSTED_SERVICE_ACCOUNTS",
        (),
        "comma-separated service accounts allowed at service doors (memory's WriteEpisode; the model function's engine "
        "warm-up, which the chart opens to none)",
    )


@dataclass(frozen=True)
class Identity:
    """The trust a function is configured with: caller tokens, and optionally service tokens; and the key of the
    pseudonym its records name callers by (`agentfn.shared.pseudonym`)."""

    caller: CallerVerifier
    service: Verifier
    trusted_services: frozenset[str]
    subject_key: bytes = field(default=b"", repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, gateway: bool = True, audience: str | None = None) -> Identity:
        """`gateway`: the part is behind a route and takes the gateway's tokens; `audience`: the default of its
        own audience for exchanged tokens (None: it takes none)."""
        s = IdentitySettings.from_env(env)
        forwarding, leeway, cooldown = s.token_forwarding, s.jwt_leeway_seconds, s.jwks_cooldown_seconds
        issuer, jwks, gateway_audience = s.jwt_issuer, s.jwks_url, s.jwt_audience
        own = s.exchanged_audience or (audience or "").strip() or None
        actors = frozenset(s.trusted_actors)
        takes_gateway = gateway or forwarding == "raw"  # raw forwarding: what reaches a part is the gateway's
        if not takes_gateway and not actors:
            raise RuntimeError(
                "AGENTFN_TRUSTED_ACTORS must name the service(s) that call this part (or AGENTFN_TOKEN_FORWARDING=raw)"
            )
        door = Door(gateway_audience if takes_gateway else None, own, actors, frozenset(s.gateway_clients))
        caller = CallerVerifier(Trust(issuer, gateway_audience, jwks, leeway, cooldown=cooldown), door)
        service = Trust(
            s.service_jwt_issuer or issuer,
            s.service_jwt_audience,
            s.service_jwks_url or jwks,
            leeway,
            s.service_jwks_ca_file,
            s.service_jwks_token_file,
            cooldown,
        )
        if service.audience in (gateway_audience, own) or own == gateway_audience:
            raise RuntimeError("caller, exchanged and service tokens need different audiences")
        trusted = frozenset(s.trusted_service_accounts)
        return cls(caller, Verifier(service), trusted, pseudonym.read_key(env))

    def warm(self) -> None:
        """Load what the first token's check needs (PyJWT, its crypto backend), before that token comes."""
        key_set_class()

    def verifier_for(self, audience: str) -> Verifier:
        """A verifier of this issuer's caller tokens for another audience (the MCP resource's)."""
        trust = self.caller.trust
        return Verifier(Trust(trust.issuer, audience, trust.jwks_url, trust.leeway, cooldown=trust.cooldown))


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


def platform_required(view: Callable) -> Callable:
    """A door of the platform's own (a trusted service account's token, as `service_required`) that tells a caller
    apart: a valid caller token is refused with 403 (known, and not allowed here), not 401."""

    @wraps(view)
    def wrapped(*args, **kwargs):
        identity: Identity = current_app.extensions["agentfn.identity"]
        token = bearer_token()
        try:
            g.service = verify_service(identity.service, token, identity.trusted_services)
        except ProblemError as refused:
            if refused.status != 401:
                raise
            try:
                verify_caller(identity.caller, token)
            except ProblemError:
                raise refused from None
            raise forbidden("this door is the platform's own: a caller's token is not accepted here") from None
        return view(*args, **kwargs)

    return wrapped
